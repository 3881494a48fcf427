#include "stages/media/frames.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "runtime/errors.hpp"

namespace {

using vgen::ErrorKind;
using vgen::VideoFrames;

// Runs fn, expecting Error(invalid_argument) whose message mentions `field`.
template <typename Fn>
void check_invalid(Fn&& fn, const std::string& field) {
  try {
    fn();
    FAIL("expected invalid_argument naming " << field);
  } catch (const vgen::Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK_MESSAGE(std::string(e.what()).find(field) != std::string::npos, e.what());
  }
}

std::uint8_t at(const VideoFrames& v, int f, int y, int x, int c) {
  return v.rgb[((static_cast<std::size_t>(f) * v.height + y) * v.width + x) * 3 + c];
}

}  // namespace

TEST_CASE("allocate gives a zeroed, valid, tightly packed clip") {
  VideoFrames v = VideoFrames::allocate(5, 3, 2, 24.0);
  CHECK(v.frame_bytes() == 45);
  CHECK(v.rgb.size() == 90);
  CHECK(v.frame(1) == v.rgb.data() + 45);
  for (auto b : v.rgb) CHECK(b == 0);
  CHECK_NOTHROW(v.validate());
  const VideoFrames& cv = v;
  CHECK(cv.frame(0) == v.rgb.data());
}

TEST_CASE("validate names the bad field") {
  VideoFrames good = VideoFrames::allocate(4, 4, 2, 16.0);
  auto with = [&](auto change) {
    VideoFrames v = good;
    change(v);
    return [v] { v.validate(); };
  };
  check_invalid(with([](VideoFrames& v) { v.width = 0; }), "width");
  check_invalid(with([](VideoFrames& v) { v.height = -2; }), "height");
  check_invalid(with([](VideoFrames& v) { v.count = 0; }), "count");
  check_invalid(with([](VideoFrames& v) { v.fps = 0.0; }), "fps");
  check_invalid(with([](VideoFrames& v) { v.fps = 240.5; }), "fps");
  check_invalid(with([](VideoFrames& v) { v.fps = std::nan(""); }), "fps");
  check_invalid(with([](VideoFrames& v) { v.rgb.pop_back(); }), "rgb");
  check_invalid(with([](VideoFrames& v) { v.count = 3; }), "rgb");
  check_invalid(with([](VideoFrames& v) {
                  v.width = std::numeric_limits<int>::max();
                  v.height = std::numeric_limits<int>::max();
                  v.count = std::numeric_limits<int>::max();
                }),
                "overflow");
  VideoFrames edge = good;
  edge.fps = 240.0;
  CHECK_NOTHROW(edge.validate());
  check_invalid([] { VideoFrames::allocate(2, 2, 1, -1.0); }, "fps");
  check_invalid([] { VideoFrames::allocate(0, 2, 1, 16.0); }, "width");
}

TEST_CASE("resize keeps a constant image constant") {
  VideoFrames v = VideoFrames::allocate(3, 5, 2, 16.0);
  for (std::size_t i = 0; i < v.rgb.size(); i += 3) {
    v.rgb[i] = 17;
    v.rgb[i + 1] = 200;
    v.rgb[i + 2] = 255;
  }
  for (auto [w, h] : {std::pair{7, 11}, std::pair{2, 2}, std::pair{1, 1}, std::pair{64, 48}}) {
    VideoFrames r = vgen::resize_frames(v, w, h);
    CHECK(r.width == w);
    CHECK(r.height == h);
    CHECK(r.count == 2);
    CHECK(r.fps == 16.0);
    CHECK_NOTHROW(r.validate());
    for (std::size_t i = 0; i < r.rgb.size(); i += 3) {
      REQUIRE(r.rgb[i] == 17);
      REQUIRE(r.rgb[i + 1] == 200);
      REQUIRE(r.rgb[i + 2] == 255);
    }
  }
}

TEST_CASE("2x upscale of 2x2: corners keep their colours, interior interpolates") {
  VideoFrames v = VideoFrames::allocate(2, 2, 1, 16.0);
  // Channel 0 holds 0, 100 / 200, 40; channels 1 and 2 hold other values.
  const std::uint8_t values[2][2] = {{0, 100}, {200, 40}};
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 2; ++x) {
      v.rgb[(y * 2 + x) * 3 + 0] = values[y][x];
      v.rgb[(y * 2 + x) * 3 + 1] = static_cast<std::uint8_t>(255 - values[y][x]);
      v.rgb[(y * 2 + x) * 3 + 2] = 9;
    }
  }
  VideoFrames r = vgen::resize_frames(v, 4, 4);
  CHECK(at(r, 0, 0, 0, 0) == 0);
  CHECK(at(r, 0, 0, 3, 0) == 100);
  CHECK(at(r, 0, 3, 0, 0) == 200);
  CHECK(at(r, 0, 3, 3, 0) == 40);
  CHECK(at(r, 0, 3, 3, 1) == 215);
  // Output x=1 samples source x=0.25: 0.75*0 + 0.25*100 = 25.
  CHECK(at(r, 0, 0, 1, 0) == 25);
  CHECK(at(r, 0, 0, 2, 0) == 75);
  // Centre-ish (1,1): source (0.25, 0.25): top 25, bottom 0.75*200+0.25*40 = 160 -> 58.75.
  CHECK(at(r, 0, 1, 1, 0) == 59);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) CHECK(at(r, 0, y, x, 2) == 9);
  }
  // Downscale back to 1x1 averages the centre: (0+100+200+40)/4 = 85.
  VideoFrames one = vgen::resize_frames(v, 1, 1);
  CHECK(at(one, 0, 0, 0, 0) == 85);
}

TEST_CASE("resize rejects bad sizes and bad input") {
  VideoFrames v = VideoFrames::allocate(2, 2, 1, 16.0);
  check_invalid([&] { vgen::resize_frames(v, 0, 4); }, "width");
  check_invalid([&] { vgen::resize_frames(v, 4, -1); }, "height");
  v.rgb.clear();
  check_invalid([&] { vgen::resize_frames(v, 4, 4); }, "rgb");
}

TEST_CASE("resize to the same size copies") {
  VideoFrames v = vgen::make_test_pattern(8, 6, 3, 16.0, 5);
  VideoFrames r = vgen::resize_frames(v, 8, 6);
  CHECK(r.rgb == v.rgb);
}

TEST_CASE("test pattern is deterministic, valid and moves") {
  VideoFrames a = vgen::make_test_pattern(64, 48, 17, 16.0, 7);
  VideoFrames b = vgen::make_test_pattern(64, 48, 17, 16.0, 7);
  VideoFrames c = vgen::make_test_pattern(64, 48, 17, 16.0, 8);
  CHECK_NOTHROW(a.validate());
  CHECK(a.width == 64);
  CHECK(a.height == 48);
  CHECK(a.count == 17);
  CHECK(a.fps == 16.0);
  CHECK(a.rgb == b.rgb);
  CHECK(a.rgb != c.rgb);
  for (int f = 1; f < a.count; ++f) {
    CHECK(!std::equal(a.frame(f - 1), a.frame(f - 1) + a.frame_bytes(), a.frame(f)));
  }
  // Odd and tiny sizes work too.
  CHECK_NOTHROW(vgen::make_test_pattern(1, 1, 1, 1.0, 0).validate());
  CHECK_NOTHROW(vgen::make_test_pattern(3, 7, 40, 30.0, 123).validate());
  check_invalid([] { vgen::make_test_pattern(4, 4, 0, 16.0, 1); }, "count");
}

TEST_CASE("a clip palette reproduces a few colours exactly") {
  VideoFrames v = VideoFrames::allocate(6, 4, 2, 16.0);
  const std::uint8_t colours[3][3] = {{10, 20, 30}, {200, 100, 50}, {255, 255, 255}};
  for (std::size_t p = 0; p < v.rgb.size() / 3; ++p)
    std::copy(colours[p % 3], colours[p % 3] + 3, &v.rgb[p * 3]);
  const vgen::ClipPalette palette = vgen::ClipPalette::build(v, 256);
  REQUIRE(palette.colours().size() == 3);
  for (const auto& c : colours) {
    const std::uint32_t got = palette.colours()[palette.index_of(c)];
    CHECK(got == (std::uint32_t{c[0]} << 16 | std::uint32_t{c[1]} << 8 | c[2]));
  }
  // A colour absent from the clip maps to the nearest entry.
  const std::uint8_t near_white[3] = {240, 250, 245};
  CHECK(palette.colours()[palette.index_of(near_white)] == 0xffffffu);
}

TEST_CASE("a clip palette respects max_colours and is deterministic") {
  const VideoFrames v = vgen::make_test_pattern(32, 24, 5, 16.0, 11);
  const vgen::ClipPalette a = vgen::ClipPalette::build(v, 16);
  const vgen::ClipPalette b = vgen::ClipPalette::build(v, 16);
  CHECK(a.colours().size() == 16);
  CHECK(a.colours() == b.colours());
  for (std::size_t i = 0; i < v.rgb.size(); i += 3) REQUIRE(a.index_of(&v.rgb[i]) < 16);
  // One colour: the mean of every pixel.
  const vgen::ClipPalette one = vgen::ClipPalette::build(v, 1);
  REQUIRE(one.colours().size() == 1);
  std::uint64_t sum[3] = {0, 0, 0};
  for (std::size_t i = 0; i < v.rgb.size(); ++i) sum[i % 3] += v.rgb[i];
  const std::uint64_t pixels = v.rgb.size() / 3;
  CHECK(one.colours()[0] == ((sum[0] + pixels / 2) / pixels << 16 |
                             (sum[1] + pixels / 2) / pixels << 8 | (sum[2] + pixels / 2) / pixels));
  check_invalid([&] { vgen::ClipPalette::build(v, 0); }, "max_colours");
  check_invalid([&] { vgen::ClipPalette::build(v, 257); }, "max_colours");
  VideoFrames broken = v;
  broken.rgb.clear();
  check_invalid([&] { vgen::ClipPalette::build(broken, 8); }, "rgb");
}
