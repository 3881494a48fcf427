// Stills: the thumbnail is the middle frame at full size (PNG), the spritesheet a grid of
// evenly spaced frames (JPEG); a missing or corrupt video is refused by name and leaves no file.
#include "stages/media/stills.hpp"

#include "runtime/errors.hpp"
#include "stages/media/encode.hpp"
#include "stages/media/frames.hpp"
#include "stages/media/image_input.hpp"
#include "tests/support/python_reference.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

namespace fs = std::filesystem;
using namespace vgen;

namespace {

// Frame i is one flat grey, 16 + 24 i: a still's pixels say which frame it shows.
int level_of(int frame) { return 16 + 24 * frame; }

VideoFrames numbered_frames(int width, int height, int count) {
  auto v = VideoFrames::allocate(width, height, count, 8.0);
  for (int f = 0; f < count; ++f)
    std::fill(v.frame(f), v.frame(f) + v.frame_bytes(), static_cast<std::uint8_t>(level_of(f)));
  return v;
}

int grey_at(const RgbImage& img, int x, int y) { return img.rgb[(static_cast<std::size_t>(y) * img.width + x) * 3 + 1]; }

}  // namespace

TEST_CASE("layout: up to 5 x 5 tiles, evenly spaced from the first frame to the last") {
  const auto l = spritesheet_layout(9, 832, 480);
  CHECK(l.tiles == 9);
  CHECK(l.columns == 3);
  CHECK(l.rows == 3);
  CHECK(l.tile_width == 256);
  CHECK(l.tile_height == 148);  // 480 * 256 / 832 = 147.7, even
  CHECK(spritesheet_frame(l, 9, 0) == 0);
  CHECK(spritesheet_frame(l, 9, 8) == 8);
  const auto big = spritesheet_layout(81, 64, 48);
  CHECK(big.tiles == 25);
  CHECK(big.columns == 5);
  CHECK(big.rows == 5);
  CHECK(big.tile_width == 64);
  CHECK(spritesheet_frame(big, 81, 24) == 80);
  CHECK(spritesheet_frame(big, 81, 12) == 40);
  const auto one = spritesheet_layout(1, 63, 33);
  CHECK(one.tiles == 1);
  CHECK(one.tile_width % 2 == 0);
  CHECK(one.tile_height % 2 == 0);
  CHECK(thumbnail_frame(9) == 4);
  CHECK(thumbnail_frame(1) == 0);
}

TEST_CASE("the thumbnail is the middle frame as PNG, the spritesheet every frame of a short clip as JPEG") {
  const auto dir = test::temp_dir("vgen-stills-");
  const auto video = dir / "clip.mp4";
  encode_to_file(numbered_frames(64, 48, 9), video, {.format = "mp4", .crf = 10});

  write_thumbnail(video, dir / "clip.thumbnail.png");
  std::ifstream in(dir / "clip.thumbnail.png", std::ios::binary);
  const std::string png((std::istreambuf_iterator<char>(in)), {});
  CHECK(read_image_header(png, "thumbnail").format == ImageFormat::png);
  const auto thumb = decode_image(png, "thumbnail");
  CHECK(thumb.width == 64);
  CHECK(thumb.height == 48);
  CHECK(std::abs(grey_at(thumb, 32, 24) - level_of(4)) <= 4);

  write_spritesheet(video, dir / "clip.spritesheet.jpg");
  std::ifstream sin(dir / "clip.spritesheet.jpg", std::ios::binary);
  const std::string jpg((std::istreambuf_iterator<char>(sin)), {});
  CHECK(read_image_header(jpg, "spritesheet").format == ImageFormat::jpeg);
  const auto sheet = decode_image(jpg, "spritesheet");
  const auto layout = spritesheet_layout(9, 64, 48);
  REQUIRE(sheet.width == layout.columns * layout.tile_width);
  REQUIRE(sheet.height == layout.rows * layout.tile_height);
  for (int tile = 0; tile < layout.tiles; ++tile) {
    CAPTURE(tile);
    const int x = (tile % layout.columns) * layout.tile_width + layout.tile_width / 2;
    const int y = (tile / layout.columns) * layout.tile_height + layout.tile_height / 2;
    CHECK(std::abs(grey_at(sheet, x, y) - level_of(spritesheet_frame(layout, 9, tile))) <= 6);
  }
  fs::remove_all(dir);
}

TEST_CASE("a missing or corrupt video is refused by name and writes no still") {
  const auto dir = test::temp_dir("vgen-stills-");
  std::ofstream(dir / "text.mp4") << "not a video";
  for (const auto& video : {dir / "missing.mp4", dir / "text.mp4"}) {
    CAPTURE(video);
    for (const bool thumbnail : {true, false}) {
      const auto target = dir / (thumbnail ? "out.png" : "out.jpg");
      try {
        thumbnail ? write_thumbnail(video, target) : write_spritesheet(video, target);
        FAIL("no error");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::invalid_argument);
        CHECK(std::string(e.what()).find(video.filename().string()) != std::string::npos);
      }
      CHECK_FALSE(fs::exists(target));
    }
  }
  fs::remove_all(dir);
}
