// VideoFrames: the decoded clip handed from the decode stage to the encode stage.
//
// Layout: uint8 RGB, frame-major and tightly packed (no row padding): the byte for frame f,
// row y, column x, channel c is rgb[((f * height + y) * width + x) * 3 + c]. fps is the
// intended playback rate; frames carry no timestamps of their own (frame i is shown at i/fps).
//
// Ownership: a VideoFrames owns its pixels (a plain value type; copy it or move it).
// Thread-safety: none of its own; concurrent reads of one object are fine, as for std::vector.
// Nothing here blocks or can be cancelled; the functions are pure CPU work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vgen {

struct VideoFrames {
  int width = 0;
  int height = 0;
  int count = 0;
  double fps = 16.0;
  std::vector<std::uint8_t> rgb;

  // width * height * 3.
  std::size_t frame_bytes() const;
  // Start of frame f; f must be in [0, count) (checked only by assert).
  const std::uint8_t* frame(int f) const;
  std::uint8_t* frame(int f);

  // Throws Error(invalid_argument) naming the field when width, height or count is not
  // positive, fps is not in (0, 240], the total size overflows, or rgb.size() is not
  // count * frame_bytes().
  void validate() const;

  // A zero-filled (black) clip; throws as validate() does for bad arguments.
  static VideoFrames allocate(int width, int height, int count, double fps);
};

// Bilinear resampling of every frame to width x height (pixel centres aligned, edges
// clamped, as torch's interpolate(..., align_corners=False) and swscale's SWS_BILINEAR for
// upscaling). Meant for upscaling a model's native resolution to the output size; it does not
// low-pass filter, so shrinking by more than 2x aliases. Same size returns a copy.
// Throws Error(invalid_argument) if `in` is invalid or width/height is not positive.
VideoFrames resize_frames(const VideoFrames& in, int width, int height);

// A deterministic clip for tests and demos: a gradient background (red across, green down,
// blue changing with time) with a coloured square that moves diagonally and bounces off the
// edges. The same arguments always give the same bytes; the seed picks the square's colour
// and starting position. Throws as VideoFrames::allocate does.
VideoFrames make_test_pattern(int width, int height, int count, double fps, std::uint32_t seed);

// An adaptive palette shared by a whole clip, for paletted output (GIF). Built by median cut
// over a 5-bit-per-channel histogram of every pixel; each entry is the mean of the pixels it
// stands for, so a clip with at most max_colours distinct colours (distinct at 5 bits per
// channel) is reproduced exactly. index_of maps a pixel to the entry nearest to its
// histogram bin's mean. Immutable after build: safe to share between threads.
class ClipPalette {
 public:
  // max_colours in [1, 256]; throws Error(invalid_argument) for it or for invalid frames.
  static ClipPalette build(const VideoFrames& frames, int max_colours);

  // Entries as 0xRRGGBB; between 1 and max_colours of them.
  const std::vector<std::uint32_t>& colours() const { return colours_; }
  // Index into colours() for one RGB pixel (3 bytes).
  std::uint8_t index_of(const std::uint8_t* rgb) const {
    return index_[static_cast<std::size_t>(rgb[0] >> 3) << 10 | (rgb[1] >> 3) << 5 | rgb[2] >> 3];
  }

 private:
  std::vector<std::uint32_t> colours_;
  std::vector<std::uint8_t> index_;  // by 15-bit colour key
};

}  // namespace vgen
