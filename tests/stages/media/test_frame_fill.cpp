#include "stages/media/frame_fill.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

vgen::av::FramePtr frame_of(AVPixelFormat format, int width, int height) {
  auto frame = vgen::av::alloc_frame();
  frame->format = format;
  frame->width = width;
  frame->height = height;
  REQUIRE(av_frame_get_buffer(frame.get(), 0) >= 0);
  return frame;
}

vgen::VideoFrames solid(int width, int height, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  auto frames = vgen::VideoFrames::allocate(width, height, 1, 16.0);
  for (int i = 0; i < width * height; ++i) {
    frames.frame(0)[3 * i] = r;
    frames.frame(0)[3 * i + 1] = g;
    frames.frame(0)[3 * i + 2] = b;
  }
  return frames;
}

}  // namespace

TEST_CASE("rgb24 is copied row by row into the frame's own stride") {
  const auto frames = vgen::make_test_pattern(10, 6, 1, 16.0, 2);
  auto frame = frame_of(AV_PIX_FMT_RGB24, 10, 6);
  vgen::RgbFiller().fill(frames.frame(0), frame.get());
  for (int y = 0; y < 6; ++y)
    for (int x = 0; x < 30; ++x) CHECK(frame->data[0][y * frame->linesize[0] + x] == frames.frame(0)[y * 30 + x]);
}

TEST_CASE("full-range RGB becomes limited-range BT.709 YUV, not BT.601") {
  // BT.709 limited range: white Y=235, black Y=16, pure red Y=63 (BT.601 would give 81).
  struct Case { std::uint8_t r, g, b; int y; };
  for (const Case c : {Case{255, 255, 255, 235}, Case{0, 0, 0, 16}, Case{255, 0, 0, 63}}) {
    const auto frames = solid(8, 4, c.r, c.g, c.b);
    auto frame = frame_of(AV_PIX_FMT_YUV420P, 8, 4);
    vgen::YuvFiller(8, 4).fill(frames.frame(0), frame.get());
    INFO("rgb " << int(c.r) << "," << int(c.g) << "," << int(c.b) << " -> Y " << int(frame->data[0][0]));
    CHECK(std::abs(int(frame->data[0][0]) - c.y) <= 1);
    CHECK(std::abs(int(frame->data[0][frame->linesize[0] * 3 + 7]) - c.y) <= 1);  // the last row too
  }
}

TEST_CASE("a paletted frame indexes the clip's palette and carries it, with index 255 transparent") {
  const auto frames = solid(4, 2, 200, 40, 10);
  auto frame = frame_of(AV_PIX_FMT_PAL8, 4, 2);
  vgen::PaletteFiller filler(frames);
  filler.fill(frames.frame(0), frame.get());
  const std::uint8_t index = frame->data[0][0];
  CHECK(index != 255);
  std::uint32_t argb = 0;
  std::memcpy(&argb, frame->data[1] + 4 * index, 4);
  CHECK(argb == (0xff000000u | 200u << 16 | 40u << 8 | 10u));  // one colour: reproduced exactly
  std::memcpy(&argb, frame->data[1] + 4 * 255, 4);
  CHECK(argb == 0u);
}
