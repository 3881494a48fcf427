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

VideoInfo probe_file(const fs::path& path) {
  AVFormatContext* raw = nullptr;
  if (int e = avformat_open_input(&raw, path.c_str(), nullptr, nullptr); e < 0) bad(path, "cannot be opened (" + av::error_text(e) + ")");
  av::InputFormatPtr fmt(raw);
  if (int e = avformat_find_stream_info(fmt.get(), nullptr); e < 0) bad(path, "no stream information (" + av::error_text(e) + ")");
  const AVCodec* codec = nullptr;
  const int index = av_find_best_stream(fmt.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (index < 0 || codec == nullptr) bad(path, "no decodable video stream");
  av::CodecContextPtr ctx(avcodec_alloc_context3(codec));
  if (!ctx || avcodec_parameters_to_context(ctx.get(), fmt->streams[index]->codecpar) < 0 ||
      avcodec_open2(ctx.get(), codec, nullptr) < 0)
    bad(path, std::string("cannot open the ") + codec->name + " decoder");
  ctx->err_recognition |= AV_EF_EXPLODE;

  VideoInfo info;
  info.codec = codec->name;
  info.width = ctx->width;
  info.height = ctx->height;
  if (const auto* tag = av_dict_get(fmt->metadata, "comment", nullptr, 0)) info.comment = tag->value;

  const av::PacketPtr packet = av::alloc_packet();
  const av::FramePtr frame = av::alloc_frame();
  auto drain = [&] {
    for (;;) {
      const int e = avcodec_receive_frame(ctx.get(), frame.get());
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
      if (e < 0) bad(path, "corrupt frame (" + av::error_text(e) + ")");
      ++info.frames;
      av_frame_unref(frame.get());
    }
  };
  for (;;) {
    const int e = av_read_frame(fmt.get(), packet.get());
    if (e == AVERROR_EOF) break;
    if (e < 0) bad(path, "truncated or unreadable (" + av::error_text(e) + ")");
    if (packet->stream_index == index) {
      const int s = avcodec_send_packet(ctx.get(), packet.get());
      av_packet_unref(packet.get());
      if (s < 0 && s != AVERROR(EAGAIN)) bad(path, "corrupt packet (" + av::error_text(s) + ")");
      drain();
    } else {
      av_packet_unref(packet.get());
    }
  }
  avcodec_send_packet(ctx.get(), nullptr);
  drain();
  if (info.frames == 0) bad(path, "no frames");
  return info;
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
    return info;
  }
  if (!fs::is_regular_file(path, ec)) bad(path, "does not exist");
  return probe_file(path);
}

}  // namespace vgen
