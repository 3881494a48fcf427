// Image input: decode PNG/JPEG/WebP bytes to RGB, refuse hostile input by field, resize, crop.
#include "stages/media/image_input.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "stages/media/libav.hpp"
#include "tests/support/python_reference.hpp"
#include "tests/support/temp_dir.hpp"

#include <cstring>
#include <fstream>
#include <random>
#include <string>

using vgen::Error;
using vgen::ErrorKind;
using vgen::RgbImage;
namespace av = vgen::av;

namespace {

RgbImage gradient(int w, int h) {
  RgbImage img{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      auto* p = img.rgb.data() + (static_cast<std::size_t>(y) * w + x) * 3;
      p[0] = static_cast<std::uint8_t>(x * 255 / std::max(1, w - 1));
      p[1] = static_cast<std::uint8_t>(y * 255 / std::max(1, h - 1));
      p[2] = static_cast<std::uint8_t>((x + y) * 255 / std::max(1, w + h - 2));
    }
  return img;
}

// Encodes `img` with the named libav encoder in `format` (converted from RGB24 by swscale).
// Empty when this FFmpeg lacks the encoder.
std::string encode(const RgbImage& img, const char* encoder, AVPixelFormat format, const char* option = nullptr,
                   const char* value = nullptr) {
  const AVCodec* codec = avcodec_find_encoder_by_name(encoder);
  if (codec == nullptr) return {};
  av::CodecContextPtr ctx(avcodec_alloc_context3(codec));
  ctx->width = img.width;
  ctx->height = img.height;
  ctx->pix_fmt = format;
  ctx->time_base = {1, 25};
  ctx->color_range = AVCOL_RANGE_JPEG;
  av::Dictionary options;
  if (option != nullptr) options.set(option, value);
  av::check(avcodec_open2(ctx.get(), codec, options.address()), "open encoder");
  auto frame = av::alloc_frame();
  frame->width = img.width;
  frame->height = img.height;
  frame->format = format;
  av::check(av_frame_get_buffer(frame.get(), 0), "frame buffer");
  av::SwsPtr sws(sws_getContext(img.width, img.height, AV_PIX_FMT_RGB24, img.width, img.height, format,
                                SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr));
  const std::uint8_t* src[4] = {img.rgb.data(), nullptr, nullptr, nullptr};
  const int stride[4] = {img.width * 3, 0, 0, 0};
  sws_scale(sws.get(), src, stride, 0, img.height, frame->data, frame->linesize);
  av::check(avcodec_send_frame(ctx.get(), frame.get()), "send frame");
  avcodec_send_frame(ctx.get(), nullptr);
  std::string out;
  auto packet = av::alloc_packet();
  while (avcodec_receive_packet(ctx.get(), packet.get()) >= 0) {
    out.append(reinterpret_cast<const char*>(packet->data), static_cast<std::size_t>(packet->size));
    av_packet_unref(packet.get());
  }
  return out;
}

std::string png_of(const RgbImage& img) { return encode(img, "png", AV_PIX_FMT_RGB24); }

struct Failure {
  ErrorKind kind = ErrorKind::internal;
  std::string message;
  bool thrown = false;
};
template <class F>
Failure failure_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.kind(), e.what(), true};
  }
  return {};
}

// Refused as bad input naming the field, with `words` in the message.
void check_refused(const std::string& bytes, const std::string& words, const vgen::ImageLimits& limits = {}) {
  const auto f = failure_of([&] { vgen::decode_image(bytes, "last_image", limits); });
  CHECK_MESSAGE(f.thrown, words);
  CHECK(f.kind == ErrorKind::invalid_argument);
  CHECK_MESSAGE(f.message.starts_with("last_image: "), f.message);
  CHECK_MESSAGE(f.message.find(words) != std::string::npos, f.message);
}

void put_be32(std::string& s, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (24 - 8 * i));
}

int max_diff(const RgbImage& a, const RgbImage& b) {
  REQUIRE(a.rgb.size() == b.rgb.size());
  int d = 0;
  for (std::size_t i = 0; i < a.rgb.size(); ++i) d = std::max(d, std::abs(int(a.rgb[i]) - int(b.rgb[i])));
  return d;
}

}  // namespace

TEST_CASE("PNG decodes to the exact RGB it was made from; grey and alpha become RGB") {
  const auto img = gradient(37, 21);
  const auto bytes = png_of(img);
  const auto header = vgen::read_image_header(bytes, "image");
  CHECK(header.format == vgen::ImageFormat::png);
  CHECK(header.width == 37);
  CHECK(header.height == 21);
  const auto out = vgen::decode_image(bytes, "image");
  CHECK(out.width == 37);
  CHECK(out.height == 21);
  CHECK(out.rgb == img.rgb);

  const auto rgba = vgen::decode_image(encode(img, "png", AV_PIX_FMT_RGBA), "image");
  CHECK(rgba.rgb == img.rgb);  // alpha dropped, colour kept
  const auto grey = vgen::decode_image(encode(img, "png", AV_PIX_FMT_GRAY8), "image");
  REQUIRE(grey.rgb.size() == img.rgb.size());
  for (std::size_t i = 0; i < grey.rgb.size(); i += 3) {
    CHECK(grey.rgb[i] == grey.rgb[i + 1]);
    CHECK(grey.rgb[i] == grey.rgb[i + 2]);
  }
}

TEST_CASE("JPEG and WebP decode close to their source") {
  const auto img = gradient(64, 48);
  const auto jpeg = encode(img, "mjpeg", AV_PIX_FMT_YUVJ444P, "q", "2");
  REQUIRE_FALSE(jpeg.empty());
  CHECK(vgen::read_image_header(jpeg, "image").format == vgen::ImageFormat::jpeg);
  const auto j = vgen::decode_image(jpeg, "image");
  CHECK(j.width == 64);
  CHECK(j.height == 48);
  CHECK(max_diff(j, img) <= 12);

  const auto lossy = encode(img, "libwebp", AV_PIX_FMT_YUV420P, "quality", "95");
  const auto lossless = encode(img, "libwebp", AV_PIX_FMT_BGRA, "lossless", "1");
  if (lossy.empty() || lossless.empty()) {
    MESSAGE("this FFmpeg has no libwebp encoder: WebP decoding is not exercised");
    return;
  }
  const auto h = vgen::read_image_header(lossy, "image");
  CHECK(h.format == vgen::ImageFormat::webp);
  CHECK(h.width == 64);
  CHECK(h.height == 48);
  CHECK(max_diff(vgen::decode_image(lossy, "image"), img) <= 24);
  const auto hl = vgen::read_image_header(lossless, "image");
  CHECK(hl.width == 64);
  CHECK(hl.height == 48);
  CHECK(vgen::decode_image(lossless, "image").rgb == img.rgb);
}

TEST_CASE("hostile input is refused as bad input naming the field, never a crash") {
  const auto png = png_of(gradient(40, 30));
  check_refused("", "empty");
  check_refused("hello, this is text", "not a PNG, JPEG or WebP");
  check_refused("GIF89a\x01\x00\x01\x00", "not a PNG, JPEG or WebP");
  check_refused(std::string("BM\x36\x00\x00\x00", 6), "not a PNG, JPEG or WebP");
  check_refused(png.substr(0, 8), "truncated PNG header");
  check_refused(png.substr(0, png.size() / 2), "cannot decode");
  check_refused(png.substr(0, png.size() - 16), "");  // into the last chunk's CRC
  std::string zero = png;
  put_be32(zero, 16, 0);
  check_refused(zero, "zero size");
  std::string huge = png;
  put_be32(huge, 16, 100000);
  put_be32(huge, 20, 100000);
  check_refused(huge, "larger than the limit");
  std::string negative = png;
  put_be32(negative, 16, 0x80000001u);
  check_refused(negative, "impossible size");
  std::string flipped = png;
  flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x55);
  check_refused(flipped, "");  // CRC or zlib error
  check_refused(png, "bytes", vgen::ImageLimits{.max_bytes = 100});
  check_refused(png, "larger than the limit", vgen::ImageLimits{.max_pixels = 40 * 30 - 1});
  check_refused(png, "larger than the limit", vgen::ImageLimits{.max_side = 39});

  const auto jpeg = encode(gradient(32, 32), "mjpeg", AV_PIX_FMT_YUVJ420P);
  check_refused(jpeg.substr(0, 4), "");
  check_refused(jpeg.substr(0, jpeg.size() / 3), "");
  check_refused(std::string("\xFF\xD8\xFF\xD9", 4), "no frame header");
  check_refused(std::string("RIFF\x10\x00\x00\x00WEBPVP8 ", 20), "truncated WebP");
  check_refused(std::string("RIFF\x10\x00\x00\x00WEBPXXXX", 16) + std::string(20, '\0'), "unknown chunk");
  const auto webp = encode(gradient(32, 32), "libwebp", AV_PIX_FMT_YUV420P);
  if (!webp.empty()) check_refused(webp.substr(0, webp.size() / 2), "");
}

TEST_CASE("random damage to valid images is either decoded or refused as bad input" * doctest::timeout(120)) {
  std::mt19937 rng(18);
  const std::string sources[] = {png_of(gradient(24, 16)), encode(gradient(24, 16), "mjpeg", AV_PIX_FMT_YUVJ420P),
                                 encode(gradient(24, 16), "libwebp", AV_PIX_FMT_YUV420P)};
  int refused = 0, decoded = 0;
  for (const auto& source : sources) {
    if (source.empty()) continue;
    for (int round = 0; round < 300; ++round) {
      std::string bytes = source;
      const int edits = 1 + static_cast<int>(rng() % 8);
      for (int e = 0; e < edits; ++e) bytes[rng() % bytes.size()] = static_cast<char>(rng());
      if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
      try {
        const auto img = vgen::decode_image(bytes, "image");
        CHECK(img.rgb.size() == static_cast<std::size_t>(img.width) * img.height * 3);
        ++decoded;
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::invalid_argument);
        CHECK(std::string(e.what()).starts_with("image: "));
        ++refused;
      }
    }
  }
  MESSAGE("damaged images: " << refused << " refused, " << decoded << " decoded");
  CHECK(refused > 0);
}

TEST_CASE("files: read with a size check first; missing files and folders name the field") {
  vgen::test::TempDir dir;
  const auto png = png_of(gradient(8, 8));
  std::ofstream(dir / "a.png", std::ios::binary) << png;
  CHECK(vgen::read_image_file(dir / "a.png", "image") == png);
  CHECK(vgen::decode_image_file(dir / "a.png", "image").width == 8);
  auto f = failure_of([&] { vgen::read_image_file(dir / "missing.png", "image"); });
  CHECK(f.kind == ErrorKind::invalid_argument);
  CHECK(f.message.starts_with("image: cannot read '"));
  f = failure_of([&] { vgen::read_image_file(dir.path(), "image"); });
  CHECK(f.message.find("is a directory") != std::string::npos);
  f = failure_of([&] { vgen::read_image_file(dir / "a.png", "last_image", vgen::ImageLimits{.max_bytes = 10}); });
  CHECK(f.kind == ErrorKind::invalid_argument);
  CHECK(f.message.starts_with("last_image: "));
  CHECK(f.message.find("larger than 10 bytes") != std::string::npos);
}

TEST_CASE("the content hash is SHA-256 of the bytes") {
  CHECK(vgen::image_sha256("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("resize gives the asked size, keeps flat colours and follows the content") {
  RgbImage flat{50, 30, {}};
  for (int i = 0; i < 50 * 30; ++i) flat.rgb.insert(flat.rgb.end(), {200, 30, 90});
  for (auto filter : {vgen::ResizeFilter::lanczos, vgen::ResizeFilter::bicubic, vgen::ResizeFilter::bilinear}) {
    const auto down = vgen::resize_rgb(flat, 17, 9, filter);
    CHECK(down.width == 17);
    CHECK(down.height == 9);
    REQUIRE(down.rgb.size() == 17 * 9 * 3);
    for (std::size_t i = 0; i < down.rgb.size(); i += 3) {
      CHECK(down.rgb[i] == 200);
      CHECK(down.rgb[i + 1] == 30);
      CHECK(down.rgb[i + 2] == 90);
    }
  }
  // A left-to-right red ramp stays a ramp when upscaled, and channels do not leak.
  const auto img = gradient(32, 32);
  const auto up = vgen::resize_rgb(img, 96, 64);
  CHECK(up.rgb[0] < 20);
  CHECK(up.rgb[(95) * 3] > 235);
  CHECK(up.rgb[(63 * 96) * 3 + 1] > 235);
  // Back down to the source size it is close to the source.
  CHECK(max_diff(vgen::resize_rgb(up, 32, 32), img) <= 8);
  const auto f = failure_of([&] { vgen::resize_rgb(img, 0, 10); });
  CHECK(f.kind == ErrorKind::invalid_argument);
}

TEST_CASE("centre crop takes the middle window, rounding the offset down; CLIP's shortest-side size") {
  const auto img = gradient(7, 5);
  const auto c = vgen::center_crop(img, 4, 2);
  CHECK(c.width == 4);
  CHECK(c.height == 2);
  // left = (7-4)/2 = 1, top = (5-2)/2 = 1
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x)
      for (int ch = 0; ch < 3; ++ch)
        CHECK(c.rgb[(y * 4 + x) * 3 + ch] == img.rgb[((y + 1) * 7 + x + 1) * 3 + ch]);
  CHECK(vgen::center_crop(img, 7, 5).rgb == img.rgb);
  CHECK(failure_of([&] { vgen::center_crop(img, 8, 5); }).kind == ErrorKind::invalid_argument);

  CHECK(vgen::shortest_side_size(640, 480, 224).width == 298);
  CHECK(vgen::shortest_side_size(640, 480, 224).height == 224);
  CHECK(vgen::shortest_side_size(480, 832, 224).width == 224);
  CHECK(vgen::shortest_side_size(480, 832, 224).height == 388);
  CHECK(vgen::shortest_side_size(300, 300, 224).width == 224);
}

TEST_CASE("resize against PIL (diffusers' resize): close, not bit-identical; the difference is measured" *
          doctest::timeout(120)) {
  // A picture with edges and texture (a flat gradient would hide filter differences).
  RgbImage img = gradient(96, 64);
  std::mt19937 rng(3);
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 96; ++x)
      if (((x / 8) + (y / 8)) % 2 == 0) img.rgb[(y * 96 + x) * 3] = static_cast<std::uint8_t>(rng() % 256);
  vgen::test::TempDir dir;
  std::ofstream(dir / "in.png", std::ios::binary) << png_of(img);
  struct Case {
    int w, h;
    vgen::ResizeFilter filter;
    const char* name;
  };
  for (const Case c : {Case{48, 32, vgen::ResizeFilter::lanczos, "lanczos"}, Case{160, 112, vgen::ResizeFilter::lanczos, "lanczos"},
                       Case{40, 40, vgen::ResizeFilter::bicubic, "bicubic"}, Case{48, 32, vgen::ResizeFilter::bilinear, "bilinear"}}) {
    const auto out = dir / (std::string(c.name) + std::to_string(c.w) + ".png");
    const auto ref = vgen::test::python_reference(
        "image_resize.py", (dir / "in.png").string() + " " + out.string() + " " + std::to_string(c.w) + " " +
                               std::to_string(c.h) + " " + c.name);
    if (!ref) {
      WARN_MESSAGE(false, "VGEN_PYTHON not set: the comparison with PIL is skipped");
      return;
    }
    const auto pil = vgen::decode_image_file(out, "reference");
    const auto ours = vgen::resize_rgb(img, c.w, c.h, c.filter);
    REQUIRE(pil.rgb.size() == ours.rgb.size());
    int worst = 0;
    double sum = 0;
    for (std::size_t i = 0; i < ours.rgb.size(); ++i) {
      const int d = std::abs(int(ours.rgb[i]) - int(pil.rgb[i]));
      worst = std::max(worst, d);
      sum += d;
    }
    const double mean = sum / static_cast<double>(ours.rgb.size());
    MESSAGE("96x64 -> " << c.w << "x" << c.h << " " << std::string(c.name) << ": max |swscale - PIL| = " << worst << " levels, mean " << mean);
    CHECK(mean < 1.0);
    CHECK(worst <= 32);
  }
}
