// probe_video: what encode wrote comes back (codec, size, frames, comment tag); truncated,
// corrupt, empty and missing files are errors naming the file.
#include "runtime/errors.hpp"
#include "stages/media/encode.hpp"
#include "stages/media/probe.hpp"
#include "tests/support/python_reference.hpp"

#include <doctest/doctest.h>

#include <fstream>

namespace fs = std::filesystem;
using namespace vgen;

TEST_CASE("encoded videos probe back with their frames and comment") {
  const auto dir = test::temp_dir("vgen-probe-");
  const auto frames = make_test_pattern(64, 48, 9, 12.0, 1);
  struct Case {
    const char* format;
    const char* codec;
    bool comment;
  } cases[] = {{"mp4", "h264", true}, {"webm", "vp9", true}, {"gif", "gif", false}, {"png", "png", false}};
  for (const auto& c : cases) {
    CAPTURE(c.format);
    const auto out = dir / (std::string("clip") + extension_for(c.format));
    encode_to_file(frames, out, {.format = c.format, .comment = "vgen:abc"});
    const auto info = probe_video(out);
    CHECK(info.codec == c.codec);
    CHECK(info.width == 64);
    CHECK(info.height == 48);
    CHECK(info.frames == 9);
    if (c.comment) CHECK(info.comment == "vgen:abc");
  }
  fs::remove_all(dir);
}

TEST_CASE("truncated, corrupt, empty and missing outputs are refused by name") {
  const auto dir = test::temp_dir("vgen-probe-");
  const auto frames = make_test_pattern(64, 48, 17, 12.0, 2);
  const auto good = dir / "good.mp4";
  encode_to_file(frames, good, {.format = "mp4"});
  const auto size = fs::file_size(good);

  const auto cut = dir / "cut.mp4";
  fs::copy_file(good, cut);
  fs::resize_file(cut, size / 2);
  const auto empty = dir / "empty.mp4";
  std::ofstream(empty).close();
  const auto text = dir / "text.mp4";
  std::ofstream(text) << "not a video at all";
  for (const auto& p : {cut, empty, text, dir / "missing.mp4"}) {
    CAPTURE(p);
    try {
      const auto info = probe_video(p);
      // A cut file may still open; it must then show fewer frames than were written.
      CHECK(info.frames < 17);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find(p.filename().string()) != std::string::npos);
    }
  }
  CHECK(probe_video(good).frames == 17);
  fs::remove_all(dir);
}
