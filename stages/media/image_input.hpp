// Image input for image-to-video jobs: PNG, JPEG and WebP bytes (a file or an upload) decoded
// with FFmpeg's libavcodec into 8-bit RGB, and the resizes and crops the families apply.
//
// Every error about the image itself is Error(invalid_argument) whose message starts with the
// job field it came from ("image: ...", "last_image: ..."), so the CLI exits 2 and HTTP answers
// 400 naming it: empty, larger than ImageLimits, zero or huge dimensions in the header, another
// format (GIF, BMP, text), truncated or corrupt data. A file that cannot be read is
// invalid_argument too ("image: cannot read '/x.png': No such file or directory").
// Hostile input never crashes: dimensions are checked from the header before the decoder
// allocates, and the decoder itself is capped (AVCodecContext::max_pixels).
//
// Resizing (resize_rgb) uses libswscale, one channel at a time (no colour conversion). It is
// NOT bit-identical to PIL's Image.resize, which diffusers uses (VaeImageProcessor: resize to
// (width, height) with Lanczos; CLIPImageProcessor: bicubic to a shortest side, then a centre
// crop): both are separable windowed filters widened by the downscale factor, but the taps,
// rounding and edge handling differ. Measured against PIL on a textured 96x64 picture
// (tests/stages/media/test_image_input.cpp, tools/reference/image_resize.py): mean 0.15-0.31 levels,
// max 4 (Lanczos down 2x), 18 (Lanczos up 5/3x), 7 (bicubic), 9 (bilinear) of 255.
//
// No LibTorch here, so api/ may include it. Thread-safety: pure functions over values; any
// number may run at once. Blocking: CPU only, plus the file read in read_image_file /
// decode_image_file (run those on a worker thread when the image may be large). Cancellation:
// none; a call runs to completion (bounded by the limits).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

// Row-major, 3 bytes per pixel (R, G, B), no row padding: rgb.size() == width * height * 3.
struct RgbImage {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;
};

struct ImageLimits {
  std::uint64_t max_bytes = 32ull << 20;          // the encoded file or upload
  std::int64_t max_pixels = 8192ll * 8192;        // width * height (64 Mpx, 192 MiB of RGB)
  int max_side = 16384;                           // either dimension
};

enum class ImageFormat { png, jpeg, webp };
std::string_view format_name(ImageFormat f);      // "png", "jpeg", "webp"

// What the header says, without decoding the pixels.
struct ImageHeader {
  ImageFormat format = ImageFormat::png;
  int width = 0, height = 0;
};

// Reads the format (from its signature) and the dimensions (from the PNG IHDR, the JPEG SOF
// marker, or the WebP VP8/VP8L/VP8X chunk) and checks them and bytes.size() against `limits`.
// `field` prefixes every error message.
ImageHeader read_image_header(std::string_view bytes, std::string_view field, const ImageLimits& limits = {});

// read_image_header, then a full decode to RGB (alpha is dropped, as PIL's convert("RGB");
// grey and palette images become RGB). The decoded size must equal the header's.
RgbImage decode_image(std::string_view bytes, std::string_view field, const ImageLimits& limits = {});

// The file's bytes, refusing one over limits.max_bytes before reading it.
std::string read_image_file(const std::filesystem::path& file, std::string_view field, const ImageLimits& limits = {});
RgbImage decode_image_file(const std::filesystem::path& file, std::string_view field, const ImageLimits& limits = {});

// SHA-256 of the encoded bytes, 64 lowercase hex characters: what a job's content key and an
// upload's file name use, so the same picture under two paths is one input.
std::string image_sha256(std::string_view bytes);

enum class ResizeFilter { bilinear, bicubic, lanczos };

// `img` resized to exactly width x height (aspect ratio not kept), as PIL's
// image.resize((width, height), filter) does up to the differences stated above.
// Sizes below 1 or above ImageLimits{}.max_side throw Error(invalid_argument).
RgbImage resize_rgb(const RgbImage& img, int width, int height, ResizeFilter filter = ResizeFilter::lanczos);

// The centre width x height window, with its top-left corner at ((W - width) / 2,
// (H - height) / 2) rounded down, as transformers' center_crop. A window larger than the
// image throws Error(invalid_argument).
RgbImage center_crop(const RgbImage& img, int width, int height);

// The size CLIPImageProcessor resizes to: the shorter side becomes `shortest`, the longer one
// int(shortest * long / short) (truncated), e.g. 640x480 -> 298x224 for 224.
struct ImageSize {
  int width = 0, height = 0;
};
ImageSize shortest_side_size(int width, int height, int shortest);

}  // namespace vgen
