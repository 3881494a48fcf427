#include "stages/media/stills.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/errors.hpp"
#include "stages/media/libav.hpp"
#include "stages/media/probe.hpp"

extern "C" {
#include <libavutil/imgutils.h>
}

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace vgen {

namespace fs = std::filesystem;

namespace {

struct Canvas {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // packed RGB24, black to start with
  Canvas(int w, int h) : width(w), height(h), rgb(static_cast<std::size_t>(w) * h * 3, 0) {}
};

[[noreturn]] void bad(const fs::path& p, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, p.string() + ": " + what);
}

// Decodes `path` and calls `take(index, frame)` for each decoded frame, in order, until it
// returns false.
void for_each_frame(const fs::path& path, const std::function<bool(int, const AVFrame&)>& take) {
  AVFormatContext* raw = nullptr;
  if (int e = avformat_open_input(&raw, path.c_str(), nullptr, nullptr); e < 0) bad(path, "cannot be opened (" + av::error_text(e) + ")");
  av::InputFormatPtr fmt(raw);
  if (int e = avformat_find_stream_info(fmt.get(), nullptr); e < 0) bad(path, "no stream information (" + av::error_text(e) + ")");
  const AVCodec* codec = nullptr;
  const int stream = av_find_best_stream(fmt.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (stream < 0 || codec == nullptr) bad(path, "no decodable video stream");
  av::CodecContextPtr ctx(av::check_alloc(avcodec_alloc_context3(codec), "avcodec_alloc_context3"));
  av::check(avcodec_parameters_to_context(ctx.get(), fmt->streams[stream]->codecpar), "avcodec_parameters_to_context");
  av::check(avcodec_open2(ctx.get(), codec, nullptr), "avcodec_open2");

  const av::PacketPtr packet = av::alloc_packet();
  const av::FramePtr frame = av::alloc_frame();
  int index = 0;
  bool more = true;
  auto drain = [&] {
    while (more) {
      const int e = avcodec_receive_frame(ctx.get(), frame.get());
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
      if (e < 0) bad(path, "corrupt frame (" + av::error_text(e) + ")");
      more = take(index++, *frame);
      av_frame_unref(frame.get());
    }
  };
  while (more) {
    const int e = av_read_frame(fmt.get(), packet.get());
    if (e == AVERROR_EOF) break;
    if (e < 0) bad(path, "truncated or unreadable (" + av::error_text(e) + ")");
    if (packet->stream_index == stream) {
      const int s = avcodec_send_packet(ctx.get(), packet.get());
      av_packet_unref(packet.get());
      if (s < 0 && s != AVERROR(EAGAIN)) bad(path, "corrupt packet (" + av::error_text(s) + ")");
      drain();
    } else {
      av_packet_unref(packet.get());
    }
  }
  if (more) {
    avcodec_send_packet(ctx.get(), nullptr);
    drain();
  }
}

// Scales a decoded frame into the canvas at (x, y) as width x height RGB. vgen's encoders tag
// BT.709 (STACK.md: sws defaults to BT.601), so the frame's own colour tags choose the matrix.
void paint(const AVFrame& frame, Canvas& canvas, int x, int y, int width, int height) {
  av::SwsPtr sws(av::check_alloc(sws_getContext(frame.width, frame.height, static_cast<AVPixelFormat>(frame.format), width,
                                                height, AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr, nullptr, nullptr),
                                 "sws_getContext"));
  const int matrix = frame.colorspace == AVCOL_SPC_BT709 ? SWS_CS_ITU709 : SWS_CS_DEFAULT;
  const int* coefficients = sws_getCoefficients(matrix);
  sws_setColorspaceDetails(sws.get(), coefficients, frame.color_range == AVCOL_RANGE_JPEG ? 1 : 0, coefficients, 1, 0,
                           1 << 16, 1 << 16);
  std::uint8_t* dst[4] = {canvas.rgb.data() + (static_cast<std::size_t>(y) * canvas.width + x) * 3, nullptr, nullptr, nullptr};
  const int dst_stride[4] = {canvas.width * 3, 0, 0, 0};
  sws_scale(sws.get(), frame.data, frame.linesize, 0, frame.height, dst, dst_stride);
}

// The canvas as one PNG or JPEG image (a one-frame encode).
std::string encode_image(const Canvas& canvas, AVCodecID id) {
  const AVCodec* codec = avcodec_find_encoder(id);
  if (codec == nullptr) throw_error(ErrorKind::internal, std::string("no ") + avcodec_get_name(id) + " encoder in this FFmpeg");
  const bool jpeg = id == AV_CODEC_ID_MJPEG;
  const auto format = jpeg ? AV_PIX_FMT_YUVJ420P : AV_PIX_FMT_RGB24;
  av::CodecContextPtr ctx(av::check_alloc(avcodec_alloc_context3(codec), "avcodec_alloc_context3"));
  ctx->width = canvas.width;
  ctx->height = canvas.height;
  ctx->pix_fmt = format;
  ctx->time_base = AVRational{1, 25};
  if (jpeg) {
    ctx->flags |= AV_CODEC_FLAG_QSCALE;  // a fixed quality (qscale 3: small, no visible blocks)
    ctx->global_quality = FF_QP2LAMBDA * 3;
  }
  av::check(avcodec_open2(ctx.get(), codec, nullptr), "avcodec_open2 (still)");

  const av::FramePtr frame = av::alloc_frame();
  frame->width = canvas.width;
  frame->height = canvas.height;
  frame->format = format;
  av::check(av_frame_get_buffer(frame.get(), 0), "av_frame_get_buffer");
  const std::uint8_t* src[4] = {canvas.rgb.data(), nullptr, nullptr, nullptr};
  const int src_stride[4] = {canvas.width * 3, 0, 0, 0};
  if (jpeg) {
    av::SwsPtr sws(av::check_alloc(sws_getContext(canvas.width, canvas.height, AV_PIX_FMT_RGB24, canvas.width, canvas.height,
                                                  format, SWS_BICUBIC, nullptr, nullptr, nullptr),
                                   "sws_getContext"));
    sws_scale(sws.get(), src, src_stride, 0, canvas.height, frame->data, frame->linesize);
  } else {
    av_image_copy(frame->data, frame->linesize, src, src_stride, format, canvas.width, canvas.height);
  }
  if (jpeg) frame->quality = ctx->global_quality;

  std::string out;
  const av::PacketPtr packet = av::alloc_packet();
  av::check(avcodec_send_frame(ctx.get(), frame.get()), "avcodec_send_frame (still)");
  av::check(avcodec_send_frame(ctx.get(), nullptr), "avcodec_send_frame (flush)");
  for (;;) {
    const int e = avcodec_receive_packet(ctx.get(), packet.get());
    if (e == AVERROR_EOF || e == AVERROR(EAGAIN)) break;
    av::check(e, "avcodec_receive_packet (still)");
    out.append(reinterpret_cast<const char*>(packet->data), static_cast<std::size_t>(packet->size));
    av_packet_unref(packet.get());
  }
  if (out.empty()) throw_error(ErrorKind::internal, "the still's encoder wrote nothing");
  return out;
}

int even(int n) { return std::max(2, n - n % 2); }

}  // namespace

int thumbnail_frame(int frames) { return std::max(frames, 1) / 2; }

void write_thumbnail(const fs::path& video, const fs::path& target) {
  const auto info = probe_video(video);  // the frame count, and a corrupt file refused by name
  const int wanted = thumbnail_frame(info.frames);
  Canvas canvas(info.width, info.height);
  bool painted = false;
  for_each_frame(video, [&](int index, const AVFrame& frame) {
    if (index != wanted) return true;
    paint(frame, canvas, 0, 0, canvas.width, canvas.height);
    painted = true;
    return false;
  });
  if (!painted) bad(video, "frame " + std::to_string(wanted) + " could not be decoded");
  write_file_atomically(target, encode_image(canvas, AV_CODEC_ID_PNG));
}

SpritesheetLayout spritesheet_layout(int frames, int width, int height, int max_tiles, int max_tile_width) {
  SpritesheetLayout l;
  l.tiles = std::clamp(frames, 1, std::max(max_tiles, 1));
  l.columns = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(l.tiles))));
  l.rows = (l.tiles + l.columns - 1) / l.columns;
  const int w = std::min(std::max(width, 2), max_tile_width);
  l.tile_width = even(w);
  l.tile_height = even(static_cast<int>(std::lround(static_cast<double>(height) * w / std::max(width, 1))));
  return l;
}

int spritesheet_frame(const SpritesheetLayout& layout, int frames, int tile) {
  if (layout.tiles <= 1 || frames <= 1) return 0;
  return static_cast<int>(std::lround(static_cast<double>(tile) * (frames - 1) / (layout.tiles - 1)));
}

void write_spritesheet(const fs::path& video, const fs::path& target) {
  const auto info = probe_video(video);
  const auto layout = spritesheet_layout(info.frames, info.width, info.height);
  Canvas canvas(layout.columns * layout.tile_width, layout.rows * layout.tile_height);
  int tile = 0;
  for_each_frame(video, [&](int index, const AVFrame& frame) {
    // Several tiles may show one frame (a video shorter than the grid never is: tiles <= frames).
    while (tile < layout.tiles && spritesheet_frame(layout, info.frames, tile) == index) {
      paint(frame, canvas, (tile % layout.columns) * layout.tile_width, (tile / layout.columns) * layout.tile_height,
            layout.tile_width, layout.tile_height);
      ++tile;
    }
    return tile < layout.tiles;
  });
  if (tile < layout.tiles) bad(video, "only " + std::to_string(tile) + " of " + std::to_string(layout.tiles) + " frames decoded");
  write_file_atomically(target, encode_image(canvas, AV_CODEC_ID_MJPEG));
}

}  // namespace vgen
