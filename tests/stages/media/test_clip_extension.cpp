// Extending a clip: the join (the clip, then the segment less its first frame, at the segment's
// fps), the input read at the job's size (its last frame the same bytes as the clip's last), a
// replaced file refused by its hash, and the segment's sound moved behind the clip.
#include "stages/media/clip_extension.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "stages/media/encode.hpp"
#include "tests/support/temp_dir.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace fs = std::filesystem;
using namespace vgen;

namespace {

// Frame f of the clip filled with the byte `base + f`, so each frame's origin can be told.
VideoFrames flat_clip(int width, int height, int count, double fps, std::uint8_t base) {
  auto v = VideoFrames::allocate(width, height, count, fps);
  for (int f = 0; f < count; ++f) std::memset(v.frame(f), base + f, v.frame_bytes());
  return v;
}

double mean_abs_diff(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += std::abs(int(a[i]) - int(b[i]));
  return sum / static_cast<double>(n);
}

std::string invalid_argument_of(auto&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("the join is the clip, then the segment from its second frame, at the segment's fps") {
  const auto clip = flat_clip(8, 6, 3, 12.0, 10);      // frames 10, 11, 12
  const auto segment = flat_clip(8, 6, 4, 16.0, 100);  // frames 100 (the seam), 101, 102, 103
  const auto joined = join_extension(clip, segment);
  REQUIRE(joined.count == 3 + 4 - 1);
  CHECK(joined.width == 8);
  CHECK(joined.height == 6);
  CHECK(joined.fps == 16.0);
  joined.validate();
  const int expected[] = {10, 11, 12, 101, 102, 103};
  for (int f = 0; f < joined.count; ++f) {
    CAPTURE(f);
    CHECK(joined.frame(f)[0] == expected[f]);
    CHECK(joined.frame(f)[joined.frame_bytes() - 1] == expected[f]);
  }
}

TEST_CASE("by latents the segment starts with the clip's last N frames: the join drops N") {
  const auto clip = flat_clip(8, 6, 3, 12.0, 10);      // frames 10, 11, 12
  const auto segment = flat_clip(8, 6, 6, 16.0, 100);  // 100..104 repeat the clip's last 5; 105 is new
  const auto joined = join_extension(clip, segment, 5);
  REQUIRE(joined.count == 3 + 6 - 5);
  joined.validate();
  const int expected[] = {10, 11, 12, 105};
  for (int f = 0; f < joined.count; ++f) {
    CAPTURE(f);
    CHECK(joined.frame(f)[joined.frame_bytes() - 1] == expected[f]);
  }
  CHECK_THROWS_AS(join_extension(clip, segment, 6), Error);  // nothing new after the overlap
  CHECK_THROWS_AS(join_extension(clip, segment, 0), Error);
}

TEST_CASE("the join refuses a segment of one frame and sizes that differ") {
  const auto clip = flat_clip(8, 6, 3, 16.0, 0);
  CHECK_THROWS_AS(join_extension(clip, flat_clip(8, 6, 1, 16.0, 0)), Error);
  CHECK_THROWS_AS(join_extension(clip, flat_clip(16, 6, 5, 16.0, 0)), Error);
  try {
    join_extension(clip, flat_clip(8, 12, 5, 16.0, 0));
    FAIL("joined clips of different sizes");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::internal);
  }
}

TEST_CASE("the input is read at the job's size, its last frame the clip's last") {
  test::TempDir dir("vgen-clip-extension-");
  const auto frames = make_test_pattern(64, 48, 7, 12.0, 3);
  const auto file = dir / "in.mp4";
  encode_to_file(frames, file, {.format = "mp4", .crf = 4});
  const auto sha = video_file_sha256(file, "video");

  SUBCASE("at its own size: the same pictures, lossy, and the file's fps") {
    const auto clip = read_fitted_clip({.file = file, .sha256 = sha, .width = 64, .height = 48}, "video");
    REQUIRE(clip.count == 7);
    CHECK(clip.fps == doctest::Approx(12.0));
    for (int f = 0; f < clip.count; ++f) {
      CAPTURE(f);
      CHECK(mean_abs_diff(clip.frame(f), frames.frame(f), frames.frame_bytes()) < 6.0);
    }
    // Frames differ from each other by more than the codec's loss, so the order is checked too.
    CHECK(mean_abs_diff(clip.frame(6), frames.frame(0), frames.frame_bytes()) > 6.0);
  }
  SUBCASE("at another size: every frame resized; the last frame read alone is the same bytes") {
    const ClipSource source{.file = file, .sha256 = sha, .width = 32, .height = 64};
    const auto clip = read_fitted_clip(source, "video");
    REQUIRE(clip.count == 7);
    CHECK((clip.width == 32 && clip.height == 64));
    const auto last = read_fitted_last_frame(source, "video");
    REQUIRE((last.width == 32 && last.height == 64));
    CHECK(std::memcmp(last.rgb.data(), clip.frame(6), clip.frame_bytes()) == 0);
    CHECK(std::memcmp(last.rgb.data(), clip.frame(5), clip.frame_bytes()) != 0);
  }
  SUBCASE("a file that no longer hashes to the admitted bytes is refused, naming the field") {
    encode_to_file(make_test_pattern(64, 48, 7, 12.0, 4), file, {.format = "mp4", .crf = 4});
    const auto why = invalid_argument_of([&] { read_fitted_last_frame({.file = file, .sha256 = sha, .width = 64, .height = 48}, "video"); });
    CHECK(why.rfind("video: ", 0) == 0);
    CHECK(why.find("video_sha256 differs") != std::string::npos);
  }
  SUBCASE("a missing file is refused naming the field") {
    const auto why = invalid_argument_of([&] { read_fitted_clip({.file = dir / "none.mp4", .width = 64, .height = 48}, "video"); });
    CHECK(why.rfind("video: ", 0) == 0);
  }
}

TEST_CASE("the segment's sound starts after silence as long as the clip before the seam") {
  AudioTrack segment{.sample_rate = 1000, .channels = 2, .samples = {}};
  for (int i = 0; i < 200; ++i) segment.samples.push_back(0.5f + static_cast<float>(i) * 1e-3f);
  // 9 frames at 16 fps: the seam is frame 8, at 0.5 s = 500 samples per channel.
  const auto out = extension_audio(segment, 9, 16.0);
  CHECK(out.sample_rate == 1000);
  CHECK(out.channels == 2);
  REQUIRE(out.frames() == 500 + 100);
  for (std::size_t i = 0; i < 1000; ++i) REQUIRE(out.samples[i] == 0.0f);
  CHECK(std::memcmp(out.samples.data() + 1000, segment.samples.data(), segment.samples.size() * sizeof(float)) == 0);
}
