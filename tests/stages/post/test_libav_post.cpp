#include "stages/post/libav_post.hpp"

#include "runtime/errors.hpp"
#include "stages/post/post_process.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>

using namespace vgen;

namespace {

// The mean absolute difference of two frames (0..255).
double frame_diff(const VideoFrames& a, int fa, const VideoFrames& b, int fb) {
  double sum = 0;
  for (std::size_t i = 0; i < a.frame_bytes(); ++i) sum += std::abs(int(a.frame(fa)[i]) - int(b.frame(fb)[i]));
  return sum / static_cast<double>(a.frame_bytes());
}

// Column of the brightest-red... of the moving square: the mean x of pixels far from the
// gradient background is not needed; the pattern's frames differ, which is what we compare.

}  // namespace

TEST_CASE("interpolating N frames by f gives (N-1)f+1 frames at f x fps, the inputs at every f-th slot") {
  for (int factor : {2, 4}) {
    CAPTURE(factor);
    const auto in = make_test_pattern(64, 48, 5, 12.0, 7);
    const auto out = interpolate_frames(in, factor);
    CHECK(out.count == (5 - 1) * factor + 1);
    CHECK(out.fps == doctest::Approx(12.0 * factor));
    CHECK(out.width == 64);
    CHECK(out.height == 48);
    for (int i = 0; i < in.count; ++i) {
      CAPTURE(i);
      CHECK(frame_diff(out, i * factor, in, i) < 2.0);  // passed through, but for the YUV round trip
    }
    // A new frame lies between its neighbours: closer to their blend than either input is to
    // the other (the square moved; the new frame is not a copy of one side).
    const double gap = frame_diff(in, 1, in, 2);
    REQUIRE(gap > 0.0);
    const int mid = factor + factor / 2;  // between input 1 and input 2
    CHECK(frame_diff(out, mid, in, 1) < gap);
    CHECK(frame_diff(out, mid, in, 2) < gap);
  }
}

TEST_CASE("a one-frame clip interpolates to itself; frame rates past 240 are refused") {
  const auto one = make_test_pattern(32, 32, 1, 16.0, 1);
  const auto out = interpolate_frames(one, 2);
  CHECK(out.count == 1);
  CHECK(out.fps == 32.0);
  CHECK(out.rgb == one.rgb);
  CHECK_THROWS_AS(interpolate_frames(make_test_pattern(32, 32, 3, 120.0, 1), 4), Error);
  CHECK_THROWS_WITH_AS(interpolate_frames(one, 3), doctest::Contains("2 or 4"), Error);
}

TEST_CASE("upscaling by f multiplies both sides, keeps count and fps, and stays close to the input") {
  const auto in = make_test_pattern(40, 24, 3, 16.0, 3);
  for (int factor : {2, 4}) {
    CAPTURE(factor);
    const auto out = upscale_frames(in, factor);
    CHECK(out.width == 40 * factor);
    CHECK(out.height == 24 * factor);
    CHECK(out.count == 3);
    CHECK(out.fps == 16.0);
    // Each output pixel near a source pixel's centre stays near that pixel's value.
    double sum = 0;
    int n = 0;
    for (int f = 0; f < in.count; ++f)
      for (int y = 2; y < in.height - 2; ++y)
        for (int x = 2; x < in.width - 2; ++x) {
          const auto* s = in.frame(f) + (y * in.width + x) * 3;
          const int oy = y * factor + factor / 2, ox = x * factor + factor / 2;
          const auto* o = out.frame(f) + (oy * out.width + ox) * 3;
          for (int c = 0; c < 3; ++c) sum += std::abs(int(s[c]) - int(o[c]));
          n += 3;
        }
    CHECK(sum / n < 8.0);
  }
}

TEST_CASE("registered as minterpolate and lanczos, each checking its own output") {
  register_libav_post();
  register_libav_post();  // idempotent
  PostOptions o;
  const auto up = make_post_processor(PostKind::upscale, o);  // the default upscaler without a model
  CHECK(up->name() == "lanczos");
  CHECK_FALSE(up->uses_device());
  const auto in = make_test_pattern(32, 16, 3, 8.0, 2);
  CHECK(up->run(in, 2, "cpu:0").width == 64);
  const auto mi = make_post_processor(PostKind::interpolate, o);
  CHECK(mi->name() == "minterpolate");
  CHECK(mi->run(in, 2, "cpu:0").count == 5);
}
