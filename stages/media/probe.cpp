#include "stages/media/probe.hpp"

#include "runtime/errors.hpp"
#include "stages/media/libav.hpp"

#include <cstdio>
#include <vector>

namespace vgen {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void bad(const fs::path& p, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, p.string() + ": " + what);
}

// One stream's decoder, counting what it decodes.
struct StreamDecoder {
  int index = -1;
  av::CodecContextPtr ctx;
  long long decoded = 0;  // frames (video) or samples per channel (audio)

  void open(const fs::path& path, AVFormatContext* fmt, AVMediaType type) {
    const AVCodec* codec = nullptr;
    index = av_find_best_stream(fmt, type, -1, -1, &codec, 0);
    if (index < 0 || codec == nullptr) {
      index = -1;
      return;
    }
    ctx.reset(avcodec_alloc_context3(codec));
    if (!ctx || avcodec_parameters_to_context(ctx.get(), fmt->streams[index]->codecpar) < 0 ||
        avcodec_open2(ctx.get(), codec, nullptr) < 0)
      bad(path, std::string("cannot open the ") + codec->name + " decoder");
    ctx->err_recognition |= AV_EF_EXPLODE;
  }
  // Sends `packet` (nullptr: flush) and counts what comes out.
  void feed(const fs::path& path, const AVPacket* packet, AVFrame* frame) {
    const int s = avcodec_send_packet(ctx.get(), packet);
    if (s < 0 && s != AVERROR(EAGAIN) && !(packet == nullptr && s == AVERROR_EOF))
      bad(path, "corrupt packet (" + av::error_text(s) + ")");
    for (;;) {
      const int e = avcodec_receive_frame(ctx.get(), frame);
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
      if (e < 0) bad(path, "corrupt frame (" + av::error_text(e) + ")");
      decoded += ctx->codec_type == AVMEDIA_TYPE_AUDIO ? frame->nb_samples : 1;
      av_frame_unref(frame);
    }
  }
};

// Decodes every packet of the best video stream (unless `video` is false) and of the best
// audio stream; `video` false: a WAV, which must have sound.
VideoInfo probe_file(const fs::path& path, bool video = true) {
  AVFormatContext* raw = nullptr;
  if (int e = avformat_open_input(&raw, path.c_str(), nullptr, nullptr); e < 0) bad(path, "cannot be opened (" + av::error_text(e) + ")");
  av::InputFormatPtr fmt(raw);
  if (int e = avformat_find_stream_info(fmt.get(), nullptr); e < 0) bad(path, "no stream information (" + av::error_text(e) + ")");
  StreamDecoder picture, sound;
  if (video) {
    picture.open(path, fmt.get(), AVMEDIA_TYPE_VIDEO);
    if (picture.index < 0) bad(path, "no decodable video stream");
  }
  sound.open(path, fmt.get(), AVMEDIA_TYPE_AUDIO);
  if (!video && sound.index < 0) bad(path, "no decodable audio stream");

  VideoInfo info;
  if (video) {
    info.codec = picture.ctx->codec->name;
    info.width = picture.ctx->width;
    info.height = picture.ctx->height;
  }
  if (const auto* tag = av_dict_get(fmt->metadata, "comment", nullptr, 0)) info.comment = tag->value;

  const av::PacketPtr packet = av::alloc_packet();
  const av::FramePtr frame = av::alloc_frame();
  for (;;) {
    const int e = av_read_frame(fmt.get(), packet.get());
    if (e == AVERROR_EOF) break;
    if (e < 0) bad(path, "truncated or unreadable (" + av::error_text(e) + ")");
    if (packet->stream_index == picture.index && picture.index >= 0) picture.feed(path, packet.get(), frame.get());
    else if (packet->stream_index == sound.index && sound.index >= 0) sound.feed(path, packet.get(), frame.get());
    av_packet_unref(packet.get());
  }
  if (video) {
    picture.feed(path, nullptr, frame.get());
    info.frames = static_cast<int>(picture.decoded);
    if (info.frames == 0) bad(path, "no frames");
  }
  if (sound.index >= 0) {
    sound.feed(path, nullptr, frame.get());
    if (sound.decoded == 0) bad(path, "an audio stream without samples");
    info.audio.codec = sound.ctx->codec->name;
    info.audio.sample_rate = sound.ctx->sample_rate;
    info.audio.channels = sound.ctx->ch_layout.nb_channels;
    info.audio.samples = sound.decoded;
  }
  return info;
}

// The WAV encode_to_file wrote beside a gif or into a png directory, if there is one.
void probe_sidecar(const fs::path& wav, VideoInfo& info) {
  std::error_code ec;
  if (fs::is_regular_file(wav, ec)) info.audio = probe_file(wav, /*video=*/false).audio;
}

}  // namespace

VideoInfo probe_video(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {  // png frames
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".png") files.push_back(e.path());
    if (files.empty()) bad(path, "no frame_*.png files");
    VideoInfo info;
    for (std::size_t i = 0; i < files.size(); ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "frame_%05zu.png", i);
      const auto one = probe_file(path / name);
      if (i == 0) info = one;
      else if (one.width != info.width || one.height != info.height) bad(path / name, "size differs from frame 0");
    }
    info.frames = static_cast<int>(files.size());
    probe_sidecar(path / "audio.wav", info);
    return info;
  }
  if (!fs::is_regular_file(path, ec)) bad(path, "does not exist");
  auto info = probe_file(path);
  if (info.audio.codec.empty() && path.extension() == ".gif") probe_sidecar(fs::path(path).replace_extension(".wav"), info);
  return info;
}

}  // namespace vgen
