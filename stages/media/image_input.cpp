#include "stages/media/image_input.hpp"

#include "runtime/content_key.hpp"
#include "runtime/errors.hpp"
#include "stages/media/libav.hpp"

extern "C" {
#include <libavutil/pixdesc.h>
}

#include <cerrno>
#include <cstring>
#include <fstream>

namespace vgen {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void bad(std::string_view field, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, std::string(field) + ": " + what);
}

std::uint32_t byte_at(std::string_view b, std::size_t i) { return static_cast<unsigned char>(b[i]); }
std::uint32_t be16(std::string_view b, std::size_t i) { return byte_at(b, i) << 8 | byte_at(b, i + 1); }
std::uint32_t be32(std::string_view b, std::size_t i) { return be16(b, i) << 16 | be16(b, i + 2); }
std::uint32_t le16(std::string_view b, std::size_t i) { return byte_at(b, i) | byte_at(b, i + 1) << 8; }
std::uint32_t le24(std::string_view b, std::size_t i) { return le16(b, i) | byte_at(b, i + 2) << 16; }
std::uint32_t le32(std::string_view b, std::size_t i) { return le24(b, i) | byte_at(b, i + 3) << 24; }

constexpr std::string_view kPngSignature("\x89PNG\r\n\x1a\n", 8);

// Width and height from the first SOFn marker; {0, 0} when the markers end first.
ImageHeader jpeg_header(std::string_view b, std::string_view field) {
  std::size_t i = 2;  // after FF D8
  while (i + 4 <= b.size()) {
    if (byte_at(b, i) != 0xFF) bad(field, "corrupt JPEG (no marker at byte " + std::to_string(i) + ")");
    const auto marker = byte_at(b, i + 1);
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no length
      i += 2;
      continue;
    }
    if (marker == 0xD9 || marker == 0xDA) break;  // end of image, start of scan: no SOF before it
    const auto length = be16(b, i + 2);
    if (length < 2) bad(field, "corrupt JPEG (marker length " + std::to_string(length) + ")");
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) {
      if (i + 9 > b.size()) break;
      return {ImageFormat::jpeg, static_cast<int>(be16(b, i + 7)), static_cast<int>(be16(b, i + 5))};
    }
    i += 2 + length;
  }
  bad(field, "truncated JPEG (no frame header)");
}

ImageHeader webp_header(std::string_view b, std::string_view field) {
  if (b.size() < 30) bad(field, "truncated WebP header");
  const std::string_view chunk = b.substr(12, 4);
  if (chunk == "VP8 ") {
    if (byte_at(b, 23) != 0x9d || byte_at(b, 24) != 0x01 || byte_at(b, 25) != 0x2a) bad(field, "corrupt WebP (VP8 start code)");
    return {ImageFormat::webp, static_cast<int>(le16(b, 26) & 0x3fff), static_cast<int>(le16(b, 28) & 0x3fff)};
  }
  if (chunk == "VP8L") {
    if (byte_at(b, 20) != 0x2f) bad(field, "corrupt WebP (VP8L signature)");
    const auto bits = le32(b, 21);
    return {ImageFormat::webp, static_cast<int>((bits & 0x3fff) + 1), static_cast<int>(((bits >> 14) & 0x3fff) + 1)};
  }
  if (chunk == "VP8X") {
    if (byte_at(b, 20) & 0x02) bad(field, "animated WebP is not supported (give one picture)");
    return {ImageFormat::webp, static_cast<int>(le24(b, 24) + 1), static_cast<int>(le24(b, 27) + 1)};
  }
  bad(field, "corrupt WebP (unknown chunk)");
}

AVCodecID codec_of(ImageFormat f) {
  switch (f) {
    case ImageFormat::png: return AV_CODEC_ID_PNG;
    case ImageFormat::jpeg: return AV_CODEC_ID_MJPEG;
    case ImageFormat::webp: return AV_CODEC_ID_WEBP;
  }
  return AV_CODEC_ID_NONE;
}

// One decoded frame, converted to packed RGB24 (alpha dropped, grey/palette/YUV expanded).
RgbImage to_rgb(const AVFrame& frame, std::string_view field) {
  RgbImage out{frame.width, frame.height, {}};
  out.rgb.resize(static_cast<std::size_t>(out.width) * out.height * 3);
  // JPEG decodes to full-range YUVJ formats; mapping them to the plain YUV format with the
  // full range set on the context keeps swscale from warning about deprecated formats.
  auto src_format = static_cast<AVPixelFormat>(frame.format);
  bool full_range = frame.color_range == AVCOL_RANGE_JPEG;
  switch (src_format) {
    case AV_PIX_FMT_YUVJ420P: src_format = AV_PIX_FMT_YUV420P; full_range = true; break;
    case AV_PIX_FMT_YUVJ422P: src_format = AV_PIX_FMT_YUV422P; full_range = true; break;
    case AV_PIX_FMT_YUVJ444P: src_format = AV_PIX_FMT_YUV444P; full_range = true; break;
    case AV_PIX_FMT_YUVJ440P: src_format = AV_PIX_FMT_YUV440P; full_range = true; break;
    default: break;
  }
  av::SwsPtr sws(sws_getContext(frame.width, frame.height, src_format, frame.width, frame.height, AV_PIX_FMT_RGB24,
                                SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr));
  if (!sws) bad(field, std::string("unsupported pixel format ") + (av_get_pix_fmt_name(src_format) ? av_get_pix_fmt_name(src_format) : "?"));
  if (full_range) {
    int *inv = nullptr, *tab = nullptr, src_range = 0, dst_range = 0, bright = 0, contrast = 0, saturation = 0;
    if (sws_getColorspaceDetails(sws.get(), &inv, &src_range, &tab, &dst_range, &bright, &contrast, &saturation) >= 0)
      sws_setColorspaceDetails(sws.get(), inv, 1, tab, 1, bright, contrast, saturation);
  }
  std::uint8_t* dst[4] = {out.rgb.data(), nullptr, nullptr, nullptr};
  int dst_stride[4] = {out.width * 3, 0, 0, 0};
  if (sws_scale(sws.get(), frame.data, frame.linesize, 0, frame.height, dst, dst_stride) != frame.height)
    bad(field, "cannot convert the decoded picture to RGB");
  return out;
}

}  // namespace

std::string_view format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::png: return "png";
    case ImageFormat::jpeg: return "jpeg";
    case ImageFormat::webp: return "webp";
  }
  return "?";
}

ImageHeader read_image_header(std::string_view b, std::string_view field, const ImageLimits& limits) {
  if (b.empty()) bad(field, "empty (0 bytes)");
  if (b.size() > limits.max_bytes)
    bad(field, "larger than " + std::to_string(limits.max_bytes) + " bytes (got " + std::to_string(b.size()) + ")");
  ImageHeader h;
  if (b.starts_with(kPngSignature)) {
    if (b.size() < 24 || b.substr(12, 4) != "IHDR") bad(field, "truncated PNG header");
    const auto w = be32(b, 16), hh = be32(b, 20);
    if (w > INT32_MAX || hh > INT32_MAX) bad(field, "PNG header gives an impossible size");
    h = {ImageFormat::png, static_cast<int>(w), static_cast<int>(hh)};
  } else if (b.size() >= 3 && byte_at(b, 0) == 0xFF && byte_at(b, 1) == 0xD8 && byte_at(b, 2) == 0xFF) {
    h = jpeg_header(b, field);
  } else if (b.size() >= 12 && b.starts_with("RIFF") && b.substr(8, 4) == "WEBP") {
    h = webp_header(b, field);
  } else {
    bad(field, "not a PNG, JPEG or WebP image");
  }
  if (h.width <= 0 || h.height <= 0)
    bad(field, "zero size (" + std::to_string(h.width) + "x" + std::to_string(h.height) + ")");
  const auto pixels = static_cast<std::int64_t>(h.width) * h.height;
  if (h.width > limits.max_side || h.height > limits.max_side || pixels > limits.max_pixels)
    bad(field, std::to_string(h.width) + "x" + std::to_string(h.height) + " is larger than the limit (" +
                   std::to_string(limits.max_pixels) + " pixels, " + std::to_string(limits.max_side) + " per side)");
  return h;
}

RgbImage decode_image(std::string_view bytes, std::string_view field, const ImageLimits& limits) {
  const ImageHeader header = read_image_header(bytes, field, limits);
  const std::string kind(format_name(header.format));
  const AVCodec* codec = avcodec_find_decoder(codec_of(header.format));
  if (codec == nullptr) throw_error(ErrorKind::internal, "this FFmpeg has no " + kind + " decoder");
  av::CodecContextPtr ctx(av::check_alloc(avcodec_alloc_context3(codec), "allocating a decoder"));
  ctx->max_pixels = limits.max_pixels;
  ctx->err_recognition |= AV_EF_EXPLODE | AV_EF_CRCCHECK;  // a truncated or damaged file fails, not half-grey
  ctx->thread_count = 1;
  // A bad image is the client's error, reported in the thrown message: the decoder's own
  // complaints ("Invalid PNG signature", ...) go to debug level, not the service's error log.
  ctx->log_level_offset = AV_LOG_DEBUG - AV_LOG_ERROR;
  av::check(avcodec_open2(ctx.get(), codec, nullptr), "opening the " + kind + " decoder");

  // The decoders read up to AV_INPUT_BUFFER_PADDING_SIZE bytes past the data: pad a copy.
  const av::PacketPtr packet = av::alloc_packet();
  av::check(av_new_packet(packet.get(), static_cast<int>(bytes.size())), "allocating a packet");
  std::memcpy(packet->data, bytes.data(), bytes.size());
  packet->flags |= AV_PKT_FLAG_KEY;

  const av::FramePtr frame = av::alloc_frame();
  int e = avcodec_send_packet(ctx.get(), packet.get());
  if (e < 0) bad(field, "cannot decode the " + kind + " data (" + av::error_text(e) + ")");
  avcodec_send_packet(ctx.get(), nullptr);
  e = avcodec_receive_frame(ctx.get(), frame.get());
  if (e < 0) bad(field, "cannot decode the " + kind + " data (" + av::error_text(e) + ")");
  if (frame->decode_error_flags != 0 || (frame->flags & AV_FRAME_FLAG_CORRUPT))
    bad(field, "truncated or corrupt " + kind + " data");
  if (frame->width != header.width || frame->height != header.height)
    bad(field, "the " + kind + " decoded to " + std::to_string(frame->width) + "x" + std::to_string(frame->height) +
                   ", not the header's " + std::to_string(header.width) + "x" + std::to_string(header.height));
  return to_rgb(*frame, field);
}

std::string read_image_file(const fs::path& file, std::string_view field, const ImageLimits& limits) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) bad(field, "'" + file.string() + "' is a directory, not an image file");
  const auto size = fs::file_size(file, ec);
  if (ec) bad(field, "cannot read '" + file.string() + "': " + ec.message());
  if (size > limits.max_bytes)
    bad(field, "'" + file.string() + "' is larger than " + std::to_string(limits.max_bytes) + " bytes (got " +
                   std::to_string(size) + ")");
  std::ifstream in(file, std::ios::binary);
  if (!in) bad(field, "cannot read '" + file.string() + "': " + std::strerror(errno));
  std::string bytes(size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uint64_t>(in.gcount()) != size) bad(field, "cannot read '" + file.string() + "' (changed while read)");
  return bytes;
}

RgbImage decode_image_file(const fs::path& file, std::string_view field, const ImageLimits& limits) {
  return decode_image(read_image_file(file, field, limits), field, limits);
}

std::string image_sha256(std::string_view bytes) { return content_key_bytes(bytes).hex(); }

RgbImage resize_rgb(const RgbImage& img, int width, int height, ResizeFilter filter) {
  const int max_side = ImageLimits{}.max_side;
  if (width < 1 || height < 1 || width > max_side || height > max_side)
    bad("resize", "size must be 1.." + std::to_string(max_side) + " per side (got " + std::to_string(width) + "x" +
                      std::to_string(height) + ")");
  if (img.width < 1 || img.height < 1 || img.rgb.size() != static_cast<std::size_t>(img.width) * img.height * 3)
    bad("resize", "not a valid RGB image");
  const int flags = (filter == ResizeFilter::lanczos   ? SWS_LANCZOS
                     : filter == ResizeFilter::bicubic ? SWS_BICUBIC
                                                       : SWS_BILINEAR) |
                    SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT;
  // Grey planes: swscale filters them as they are, where RGB input would go through YUV.
  av::SwsPtr sws(sws_getContext(img.width, img.height, AV_PIX_FMT_GRAY8, width, height, AV_PIX_FMT_GRAY8, flags, nullptr,
                                nullptr, nullptr));
  if (!sws) throw_error(ErrorKind::internal, "resize: swscale refused the sizes");
  const std::size_t in_px = static_cast<std::size_t>(img.width) * img.height;
  const std::size_t out_px = static_cast<std::size_t>(width) * height;
  std::vector<std::uint8_t> plane(in_px), scaled(out_px);
  RgbImage out{width, height, std::vector<std::uint8_t>(out_px * 3)};
  for (int c = 0; c < 3; ++c) {
    for (std::size_t i = 0; i < in_px; ++i) plane[i] = img.rgb[i * 3 + c];
    const std::uint8_t* src[4] = {plane.data(), nullptr, nullptr, nullptr};
    const int src_stride[4] = {img.width, 0, 0, 0};
    std::uint8_t* dst[4] = {scaled.data(), nullptr, nullptr, nullptr};
    const int dst_stride[4] = {width, 0, 0, 0};
    if (sws_scale(sws.get(), src, src_stride, 0, img.height, dst, dst_stride) != height)
      throw_error(ErrorKind::internal, "resize: swscale failed");
    for (std::size_t i = 0; i < out_px; ++i) out.rgb[i * 3 + c] = scaled[i];
  }
  return out;
}

RgbImage center_crop(const RgbImage& img, int width, int height) {
  if (width < 1 || height < 1 || width > img.width || height > img.height)
    bad("crop", std::to_string(width) + "x" + std::to_string(height) + " does not fit in " + std::to_string(img.width) +
                    "x" + std::to_string(img.height));
  const int left = (img.width - width) / 2, top = (img.height - height) / 2;
  RgbImage out{width, height, std::vector<std::uint8_t>(static_cast<std::size_t>(width) * height * 3)};
  for (int y = 0; y < height; ++y) {
    const auto* from = img.rgb.data() + (static_cast<std::size_t>(top + y) * img.width + left) * 3;
    std::memcpy(out.rgb.data() + static_cast<std::size_t>(y) * width * 3, from, static_cast<std::size_t>(width) * 3);
  }
  return out;
}

ImageSize shortest_side_size(int width, int height, int shortest) {
  if (width < 1 || height < 1 || shortest < 1) bad("resize", "sizes must be positive");
  if (width <= height)
    return {shortest, static_cast<int>(static_cast<double>(shortest) * height / width)};
  return {static_cast<int>(static_cast<double>(shortest) * width / height), shortest};
}

}  // namespace vgen
