// Video input: decode what encode wrote (frames, size, pixels), refuse hostile files by field
// before decoding where the container says enough, and check every bound.
#include "stages/media/video_input.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "stages/media/encode.hpp"
#include "stages/media/frames.hpp"
#include "tests/support/temp_dir.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
using namespace vgen;

namespace {

// The error message of decode_video_file(file, "video", limits), "" when it succeeds.
std::string refusal(const fs::path& file, const VideoLimits& limits = {}) {
  try {
    decode_video_file(file, "video", limits);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
  return {};
}

double mean_abs_diff(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += std::abs(int(a[i]) - int(b[i]));
  return sum / static_cast<double>(n);
}

}  // namespace

TEST_CASE("mp4 and webm decode back to their frames") {
  test::TempDir dir("vgen-video-input-");
  const auto frames = make_test_pattern(64, 48, 9, 12.0, 1);
  for (const char* format : {"mp4", "webm"}) {
    CAPTURE(format);
    const auto file = dir / (std::string("clip") + extension_for(format));
    encode_to_file(frames, file, {.format = format, .crf = 4});
    const auto header = read_video_header(file, "video");
    CHECK(header.width == 64);
    CHECK(header.height == 48);
    CHECK(header.fps == doctest::Approx(12.0));
    CHECK(header.codec == (std::string(format) == "mp4" ? "h264" : "vp9"));
    CHECK(video_extension(header) == extension_for(format));

    const auto clip = decode_video_file(file, "video", {}, 4);
    CHECK(clip.frames == 9);
    REQUIRE(clip.kept.size() == 4);
    for (int f = 0; f < 4; ++f) {
      CAPTURE(f);
      const auto& img = clip.kept[f];
      REQUIRE(img.width == 64);
      REQUIRE(img.height == 48);
      // Lossy (4:2:0 chroma, crf 4), but the same picture.
      CHECK(mean_abs_diff(img.rgb.data(), frames.frame(f), frames.frame_bytes()) < 6.0);
    }
    // keep = 0 decodes and checks every frame, keeping none.
    CHECK(decode_video_file(file, "video").kept.empty());
  }
}

TEST_CASE("a file's hash is the SHA-256 of its bytes and changes with them") {
  test::TempDir dir("vgen-video-input-");
  const auto a = dir / "a.mp4", b = dir / "b.mp4";
  encode_to_file(make_test_pattern(32, 32, 5, 8.0, 1), a, {.format = "mp4"});
  encode_to_file(make_test_pattern(32, 32, 5, 8.0, 2), b, {.format = "mp4"});
  const auto ha = video_file_sha256(a, "video");
  CHECK(ha.size() == 64);
  CHECK(ha == video_file_sha256(a, "video"));
  CHECK(ha != video_file_sha256(b, "video"));
}

TEST_CASE("bounds: size, frames, bytes and duration are refused naming the field") {
  test::TempDir dir("vgen-video-input-");
  const auto mp4 = dir / "clip.mp4", webm = dir / "clip.webm";
  const auto frames = make_test_pattern(64, 48, 9, 12.0, 3);
  encode_to_file(frames, mp4, {.format = "mp4"});
  encode_to_file(frames, webm, {.format = "webm"});
  for (const auto& file : {mp4, webm}) {
    CAPTURE(file);
    CHECK(refusal(file).empty());
    auto msg = refusal(file, {.max_side = 32});
    CHECK(msg.starts_with("video: 64x48 is larger than the limit"));
    msg = refusal(file, {.max_pixels = 64 * 47});
    CAPTURE(msg);
    CHECK(msg.starts_with("video: "));
    CHECK(msg.find("larger than the limit") != std::string::npos);
    // mp4 lists its frame count (refused before decoding); webm does not (refused while decoding).
    msg = refusal(file, {.max_frames = 8});
    CHECK(msg.starts_with("video: more than 8 frames"));
    CHECK(refusal(file, {.max_frames = 9}).empty());
    msg = refusal(file, {.max_bytes = 100});
    CHECK(msg.starts_with("video: '"));
    CHECK(msg.find("is larger than 100 bytes") != std::string::npos);
    msg = refusal(file, {.max_seconds = 0.5});  // 9 frames at 12 fps: 0.75 s
    CHECK(msg.starts_with("video: longer than 0 s"));
  }
}

TEST_CASE("hostile files: truncated, text, image, empty, missing, a directory") {
  test::TempDir dir("vgen-video-input-");
  const auto frames = make_test_pattern(64, 48, 17, 12.0, 4);
  const auto good = dir / "good.mp4";
  encode_to_file(frames, good, {.format = "mp4"});

  const auto cut = dir / "cut.mp4";
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(good) / 2);
  const auto text = dir / "text.mp4";
  std::ofstream(text) << "not a video at all, just a text file named like one\n";
  const auto empty = dir / "empty.mp4";
  std::ofstream(empty).close();
  // A PNG picture named .mp4: libav would read it (image pipe), but it is not a video container.
  const auto frame_dir = dir / "frames";
  encode_to_file(make_test_pattern(16, 16, 1, 8.0, 1), frame_dir, {.format = "png"});
  const auto picture = dir / "picture.mp4";
  fs::copy_file(frame_dir / "frame_00000.png", picture);

  for (const auto& file : {text, empty, picture, dir / "missing.mp4", frame_dir}) {
    CAPTURE(file);
    const auto msg = refusal(file);
    CHECK(msg.starts_with("video: "));
    CHECK(msg.find("'" + file.string() + "'") != std::string::npos);
  }
  // Cut in its media: the index opens, a packet is short.
  const auto msg = refusal(cut);
  CAPTURE(msg);
  CHECK((msg.starts_with("video: truncated") || msg.starts_with("video: corrupt")));
}

TEST_CASE("a webm cut in the middle of its frames is refused, not shortened") {
  test::TempDir dir("vgen-video-input-");
  const auto frames = make_test_pattern(64, 48, 25, 12.0, 5);
  const auto good = dir / "good.webm";
  encode_to_file(frames, good, {.format = "webm", .crf = 4});
  const auto cut = dir / "cut.webm";
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(good) * 2 / 3);
  // Matroska has no frame count to compare with: a cut cluster is a short or corrupt packet.
  const auto msg = refusal(cut);
  CHECK(msg.starts_with("video: "));
}
