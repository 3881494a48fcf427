#include "stages/media/video_input.hpp"

#include "runtime/content_key.hpp"
#include "runtime/errors.hpp"
#include "stages/media/libav.hpp"

extern "C" {
#include <libavutil/pixdesc.h>
}

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

namespace vgen {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void bad(std::string_view field, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, std::string(field) + ": " + what);
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// Size on disk, refusing what is not a regular file, is empty or is over the limit: before
// libav opens anything.
std::uint64_t checked_file_size(const fs::path& file, std::string_view field, const VideoLimits& limits) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) bad(field, quoted(file) + " is a directory, not a video file");
  const auto size = fs::file_size(file, ec);
  if (ec) bad(field, "cannot read " + quoted(file) + ": " + ec.message());
  if (size == 0) bad(field, quoted(file) + " is empty (0 bytes)");
  if (size > limits.max_bytes)
    bad(field, quoted(file) + " is larger than " + std::to_string(limits.max_bytes) + " bytes (got " + std::to_string(size) + ")");
  return size;
}

// An opened container and its chosen video stream.
struct OpenVideo {
  av::InputFormatPtr format;
  int stream = -1;
  const AVCodec* codec = nullptr;
  VideoHeader header;
};

// Per-stream options for avformat_find_stream_info: the probing decoders are capped as ours
// are, so a header that claims a huge picture is not allocated while libav looks at it.
class StreamOptions {
 public:
  StreamOptions(unsigned streams, std::int64_t max_pixels) : dicts_(streams, nullptr) {
    const auto text = std::to_string(max_pixels);
    for (auto*& d : dicts_) av_dict_set(&d, "max_pixels", text.c_str(), 0);
  }
  StreamOptions(const StreamOptions&) = delete;
  StreamOptions& operator=(const StreamOptions&) = delete;
  ~StreamOptions() {
    for (auto*& d : dicts_) av_dict_free(&d);
  }
  AVDictionary** data() { return dicts_.empty() ? nullptr : dicts_.data(); }

 private:
  std::vector<AVDictionary*> dicts_;
};

void check_size(std::string_view field, int width, int height, const VideoLimits& limits) {
  // The probing decoders are capped (StreamOptions): a stream whose container states no size
  // and whose frames are over the cap comes out of the probe without one.
  if (width <= 0 || height <= 0)
    bad(field, "the video stream's frame size cannot be read, or is larger than the limit (" + std::to_string(limits.max_pixels) +
                   " pixels, " + std::to_string(limits.max_side) + " per side)");
  const auto pixels = static_cast<std::int64_t>(width) * height;
  if (width > limits.max_side || height > limits.max_side || pixels > limits.max_pixels)
    bad(field, std::to_string(width) + "x" + std::to_string(height) + " is larger than the limit (" +
                   std::to_string(limits.max_pixels) + " pixels, " + std::to_string(limits.max_side) + " per side)");
}

void check_frames(std::string_view field, std::int64_t frames, const VideoLimits& limits) {
  if (frames > limits.max_frames)
    bad(field, "more than " + std::to_string(limits.max_frames) + " frames (the container says " + std::to_string(frames) + ")");
}

OpenVideo open_video(const fs::path& file, std::string_view field, const VideoLimits& limits) {
  checked_file_size(file, field, limits);
  av::Dictionary options;
  // Only video containers, only local files: no playlists (hls, concat), image pipes or text
  // demuxers, and nothing a container could reference outside this file.
  options.set("format_whitelist", std::string(kVideoContainers).c_str());
  options.set("protocol_whitelist", "file");
  AVFormatContext* raw = avformat_alloc_context();
  if (raw == nullptr) av::check(AVERROR(ENOMEM), "allocating a demuxer");
  // A damaged container fails here rather than demuxing garbage.
  raw->error_recognition |= AV_EF_EXPLODE;
  if (const int e = avformat_open_input(&raw, file.c_str(), nullptr, options.address()); e < 0)
    bad(field, quoted(file) + " is not a video file we read (" + av::error_text(e) +
                   "; containers: MP4/MOV, Matroska/WebM, AVI, GIF, MPEG-TS, NUT)");
  OpenVideo v{av::InputFormatPtr(raw)};
  v.header.container = v.format->iformat->name;
  // What the container claims, before libav decodes anything to probe the streams (cover art
  // is a picture, not the video: left to the stream chosen below).
  for (unsigned i = 0; i < v.format->nb_streams; ++i) {
    const AVStream* s = v.format->streams[i];
    if (s->codecpar->codec_type != AVMEDIA_TYPE_VIDEO || (s->disposition & AV_DISPOSITION_ATTACHED_PIC)) continue;
    if (s->codecpar->width > 0 && s->codecpar->height > 0) check_size(field, s->codecpar->width, s->codecpar->height, limits);
    check_frames(field, s->nb_frames, limits);
  }
  {
    StreamOptions stream_options(v.format->nb_streams, limits.max_pixels);
    if (const int e = avformat_find_stream_info(v.format.get(), stream_options.data()); e < 0)
      bad(field, "cannot read the streams of " + quoted(file) + " (" + av::error_text(e) + ")");
  }
  const int index = av_find_best_stream(v.format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &v.codec, 0);
  if (index == AVERROR_STREAM_NOT_FOUND) bad(field, quoted(file) + " has no video stream");
  const AVStream* stream = v.format->streams[index >= 0 ? index : 0];
  if (index < 0 || v.codec == nullptr) {
    const AVCodecID id = index >= 0 ? stream->codecpar->codec_id : AV_CODEC_ID_NONE;
    bad(field, quoted(file) + ": no decoder for its video stream (" + avcodec_get_name(id) + ")");
  }
  v.stream = index;
  auto& h = v.header;
  const AVCodecParameters& par = *stream->codecpar;
  h.codec = avcodec_get_name(par.codec_id);
  if (std::find(std::begin(kVideoCodecs), std::end(kVideoCodecs), h.codec) == std::end(kVideoCodecs))
    bad(field, "codec " + h.codec + " is not accepted (H.264, HEVC, VP8, VP9, AV1, MPEG-4, MPEG-2, MJPEG, PNG, GIF, FFV1, ProRes)");
  h.width = par.width;
  h.height = par.height;
  check_size(field, h.width, h.height, limits);
  h.frames = std::max<std::int64_t>(stream->nb_frames, 0);
  check_frames(field, h.frames, limits);
  if (stream->avg_frame_rate.num > 0 && stream->avg_frame_rate.den > 0) h.fps = av_q2d(stream->avg_frame_rate);
  if (v.format->duration > 0) h.seconds = static_cast<double>(v.format->duration) / AV_TIME_BASE;
  else if (stream->duration > 0) h.seconds = static_cast<double>(stream->duration) * av_q2d(stream->time_base);
  if (!(h.seconds <= limits.max_seconds))
    bad(field, "longer than " + std::to_string(static_cast<long long>(limits.max_seconds)) + " s (the container says " +
                   std::to_string(static_cast<long long>(std::ceil(h.seconds))) + " s)");
  return v;
}

// One decoded frame as packed RGB24, with the colour matrix and range the stream declares
// (BT.601 when it declares none, as players assume for SD-sized video).
RgbImage to_rgb(const AVFrame& frame, std::string_view field) {
  RgbImage out{frame.width, frame.height, {}};
  out.rgb.resize(static_cast<std::size_t>(out.width) * out.height * 3);
  auto src_format = static_cast<AVPixelFormat>(frame.format);
  bool full_range = frame.color_range == AVCOL_RANGE_JPEG;
  switch (src_format) {  // the deprecated full-range formats, as their plain form + full range
    case AV_PIX_FMT_YUVJ420P: src_format = AV_PIX_FMT_YUV420P; full_range = true; break;
    case AV_PIX_FMT_YUVJ422P: src_format = AV_PIX_FMT_YUV422P; full_range = true; break;
    case AV_PIX_FMT_YUVJ444P: src_format = AV_PIX_FMT_YUV444P; full_range = true; break;
    default: break;
  }
  av::SwsPtr sws(sws_getContext(frame.width, frame.height, src_format, frame.width, frame.height, AV_PIX_FMT_RGB24,
                                SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr));
  if (!sws) bad(field, std::string("unsupported pixel format ") + (av_get_pix_fmt_name(src_format) ? av_get_pix_fmt_name(src_format) : "?"));
  const int matrix = frame.colorspace == AVCOL_SPC_BT709 ? SWS_CS_ITU709 : SWS_CS_DEFAULT;
  int *inv = nullptr, *tab = nullptr, src_range = 0, dst_range = 0, bright = 0, contrast = 0, saturation = 0;
  if (sws_getColorspaceDetails(sws.get(), &inv, &src_range, &tab, &dst_range, &bright, &contrast, &saturation) >= 0)
    sws_setColorspaceDetails(sws.get(), sws_getCoefficients(matrix), full_range ? 1 : src_range, tab, 1, bright, contrast,
                             saturation);
  std::uint8_t* dst[4] = {out.rgb.data(), nullptr, nullptr, nullptr};
  int dst_stride[4] = {out.width * 3, 0, 0, 0};
  if (sws_scale(sws.get(), frame.data, frame.linesize, 0, frame.height, dst, dst_stride) != frame.height)
    bad(field, "cannot convert a decoded frame to RGB");
  return out;
}

// Decodes every frame of the open stream, checking each, keeping the first `keep` as RGB.
class FrameReader {
 public:
  using OnFrame = std::function<void(int, RgbImage&&)>;
  FrameReader(OpenVideo& v, std::string_view field, const VideoLimits& limits, int keep, OnFrame on_frame = {})
      : v_(v), field_(field), limits_(limits), keep_(keep), on_frame_(std::move(on_frame)) {}

  VideoClip run() {
    const AVStream* stream = v_.format->streams[v_.stream];
    av::CodecContextPtr ctx(av::check_alloc(avcodec_alloc_context3(v_.codec), "allocating a decoder"));
    av::check(avcodec_parameters_to_context(ctx.get(), stream->codecpar), "configuring the decoder");
    ctx->max_pixels = limits_.max_pixels;
    ctx->err_recognition |= AV_EF_EXPLODE | AV_EF_CRCCHECK;  // a damaged stream fails, not half-grey
    ctx->thread_count = 1;                                    // bounded memory per admission
    ctx->log_level_offset = AV_LOG_DEBUG - AV_LOG_ERROR;
    if (const int e = avcodec_open2(ctx.get(), v_.codec, nullptr); e < 0)
      bad(field_, "cannot open the " + v_.header.codec + " decoder (" + av::error_text(e) + ")");
    ctx_ = ctx.get();
    const av::PacketPtr packet = av::alloc_packet();
    for (;;) {
      const int e = av_read_frame(v_.format.get(), packet.get());
      if (e == AVERROR_EOF) break;
      if (e < 0) bad(field_, "truncated or unreadable (" + av::error_text(e) + ")");
      if (packet->stream_index != v_.stream) {
        av_packet_unref(packet.get());
        continue;
      }
      if (packet->flags & AV_PKT_FLAG_CORRUPT) bad(field_, "truncated or corrupt (a packet of frame " + std::to_string(clip_.frames) + ")");
      const int s = avcodec_send_packet(ctx_, packet.get());
      av_packet_unref(packet.get());
      if (s < 0) bad(field_, "corrupt video data at frame " + std::to_string(clip_.frames) + " (" + av::error_text(s) + ")");
      drain();
    }
    avcodec_send_packet(ctx_, nullptr);
    drain();
    if (clip_.frames == 0) bad(field_, "no frame decodes");
    if (v_.header.frames > 0 && clip_.frames < v_.header.frames)
      bad(field_, "truncated (" + std::to_string(clip_.frames) + " of the " + std::to_string(v_.header.frames) +
                      " frames the container lists decode)");
    // Containers without a frame count (Matroska, WebM) still state a duration, written when
    // the file was finished: far fewer frames than it promises is a cut file. The 10% margin
    // leaves variable frame rates and rounded durations alone.
    const double expected = v_.header.seconds * v_.header.fps;
    if (v_.header.frames == 0 && expected > 0 && clip_.frames < expected * 0.9 - 1)
      bad(field_, "truncated (" + std::to_string(clip_.frames) + " frames decode; its duration promises about " +
                      std::to_string(std::llround(expected)) + ")");
    clip_.header = v_.header;
    return std::move(clip_);
  }

 private:
  void drain() {
    const av::FramePtr frame = av::alloc_frame();
    for (;;) {
      const int e = avcodec_receive_frame(ctx_, frame.get());
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
      if (e < 0) bad(field_, "corrupt video data at frame " + std::to_string(clip_.frames) + " (" + av::error_text(e) + ")");
      if (frame->decode_error_flags != 0 || (frame->flags & AV_FRAME_FLAG_CORRUPT))
        bad(field_, "truncated or corrupt video data at frame " + std::to_string(clip_.frames));
      if (frame->width != v_.header.width || frame->height != v_.header.height)
        bad(field_, "frame " + std::to_string(clip_.frames) + " is " + std::to_string(frame->width) + "x" +
                        std::to_string(frame->height) + ", not the stream's " + std::to_string(v_.header.width) + "x" +
                        std::to_string(v_.header.height));
      if (clip_.frames >= limits_.max_frames) bad(field_, "more than " + std::to_string(limits_.max_frames) + " frames");
      if (on_frame_) on_frame_(clip_.frames, to_rgb(*frame, field_));
      else if (clip_.frames < keep_) clip_.kept.push_back(to_rgb(*frame, field_));
      ++clip_.frames;
      av_frame_unref(frame.get());
    }
  }

  OpenVideo& v_;
  std::string_view field_;
  const VideoLimits& limits_;
  int keep_;
  OnFrame on_frame_;
  AVCodecContext* ctx_ = nullptr;
  VideoClip clip_;
};

}  // namespace

VideoHeader read_video_header(const fs::path& file, std::string_view field, const VideoLimits& limits) {
  return open_video(file, field, limits).header;
}

VideoClip decode_video_file(const fs::path& file, std::string_view field, const VideoLimits& limits, int keep) {
  auto v = open_video(file, field, limits);
  return FrameReader(v, field, limits, std::max(keep, 0)).run();
}

VideoClip for_each_video_frame(const fs::path& file, std::string_view field, const VideoLimits& limits,
                               const std::function<void(int, RgbImage&&)>& on_frame) {
  auto v = open_video(file, field, limits);
  return FrameReader(v, field, limits, 0, on_frame).run();
}

std::string video_file_sha256(const fs::path& file, std::string_view field, const VideoLimits& limits) {
  const auto size = checked_file_size(file, field, limits);
  std::ifstream in(file, std::ios::binary);
  if (!in) bad(field, "cannot read " + quoted(file) + ": " + std::strerror(errno));
  std::string bytes(size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uint64_t>(in.gcount()) != size) bad(field, "cannot read " + quoted(file) + " (changed while read)");
  return content_key_bytes(bytes).hex();
}

std::string_view video_extension(const VideoHeader& h) {
  const std::string_view c = h.container;
  if (c.find("mp4") != std::string_view::npos) return ".mp4";
  if (c.find("matroska") != std::string_view::npos)
    return h.codec == "vp8" || h.codec == "vp9" || h.codec == "av1" ? ".webm" : ".mkv";
  if (c == "avi") return ".avi";
  if (c == "gif") return ".gif";
  if (c == "mpegts") return ".ts";
  if (c == "nut") return ".nut";
  return ".video";
}

}  // namespace vgen
