// Frame fillers: one RGB24 frame (tightly packed, as VideoFrames holds it) written into an
// AVFrame of the pixel format an encoder takes. encode.cpp picks one per format:
//   RgbFiller      rgb24 as it is (png)
//   YuvFiller      full-range RGB -> limited-range BT.709 yuv420p (mp4, webm); swscale assumes
//                  BT.601 unless told, so the coefficients are set explicitly
//   PaletteFiller  pal8 with one adaptive 255-colour palette per clip (gif); index 255 stays
//                  transparent for the gif encoder's unchanged pixels
// Ownership: a filler owns its converter and scratch buffers; the AVFrame is the caller's.
// Thread-safety: one filler per encode (one thread); fillers hold per-call scratch state.
// Blocking: CPU bound on the calling thread; nothing here is cancellable.
// Errors: Error(internal) when libswscale cannot be set up or a conversion fails.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stages/media/frames.hpp"
#include "stages/media/libav.hpp"

namespace vgen {

class FrameFiller {
 public:
  virtual ~FrameFiller() = default;
  // Writes one RGB24 frame (tightly packed) into `frame`, which is writable and has the
  // filler's pixel format and the clip's size.
  virtual void fill(const std::uint8_t* rgb, AVFrame* frame) = 0;
};

class RgbFiller final : public FrameFiller {  // for codecs that take RGB24 as it is
 public:
  void fill(const std::uint8_t* rgb, AVFrame* frame) override;
};

// swscale's SIMD loads read up to 16 bytes past the last row (valgrind shows it), which for the
// clip's last frame is past the vector's end: each frame goes through a padded copy.
class YuvFiller final : public FrameFiller {
 public:
  YuvFiller(int width, int height);
  void fill(const std::uint8_t* rgb, AVFrame* frame) override;

 private:
  static constexpr std::size_t padding = 64;
  int width_, height_;
  std::vector<std::uint8_t> padded_;
  av::SwsPtr sws_;
};

// The palette (ClipPalette::build over the whole clip) goes into every frame; the gif encoder
// writes it once (a global table).
class PaletteFiller final : public FrameFiller {
 public:
  explicit PaletteFiller(const VideoFrames& frames);
  void fill(const std::uint8_t* rgb, AVFrame* frame) override;

 private:
  int width_, height_;
  ClipPalette palette_;
  std::array<std::uint32_t, 256> argb_{};
};

}  // namespace vgen
