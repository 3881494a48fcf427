// Uploads: base64/data-URL image and video text, videos checked in a temporary, content-named files, pins that remove the last use,
// and the start-up sweep of what a crash left.
#include "api/http/uploads.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "stages/media/encode.hpp"
#include "stages/media/frames.hpp"
#include "stages/media/libav.hpp"
#include "tests/support/png.hpp"
#include "tests/support/temp_dir.hpp"

#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

using namespace vgen;
namespace fs = std::filesystem;

namespace {

std::string png(int w, int h, std::uint8_t shade) { return test::solid_png(w, h, shade); }

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    std::uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += i + 1 < bytes.size() ? kAlphabet[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

std::string error_of(std::string_view text, std::uint64_t max = 1 << 20) {
  try {
    decode_image_text(text, "image", max);
    return "";
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
}

}  // namespace

TEST_CASE("image text: a data URL or plain base64, with or without padding and line breaks") {
  const auto bytes = png(4, 4, 7);
  const auto b64 = base64(bytes);
  CHECK(decode_image_text(b64, "image", 1 << 20) == bytes);
  CHECK(decode_image_text("data:image/png;base64," + b64, "image", 1 << 20) == bytes);
  std::string wrapped;
  for (std::size_t i = 0; i < b64.size(); i += 10) wrapped += b64.substr(i, 10) + "\r\n";
  CHECK(decode_image_text(wrapped, "image", 1 << 20) == bytes);
  std::string unpadded = b64;
  while (!unpadded.empty() && unpadded.back() == '=') unpadded.pop_back();
  CHECK(decode_image_text(unpadded, "image", 1 << 20) == bytes);
  CHECK(error_of("AAEC").find("not base64 of a PNG, JPEG or WebP") != std::string::npos);

  CHECK(error_of("/etc/passwd").find("not base64 of a PNG") != std::string::npos);  // a path is never read
  CHECK(error_of("data:image/png,rawbytes").find("must be base64") != std::string::npos);
  CHECK(error_of("data:image/png;base64").find("without ','") != std::string::npos);
  CHECK(error_of("AAE=AA").find("not base64") != std::string::npos);
  CHECK(error_of("A").find("middle of a byte") != std::string::npos);
  CHECK(error_of(b64, 10).find("larger than 10 bytes") != std::string::npos);
  CHECK(error_of(std::string(4000, 'A'), 100).find("larger than 100 bytes") != std::string::npos);
}

TEST_CASE("put: checked before writing, named by content, one file for the same picture") {
  test::TempDir tmp;
  UploadStore store(tmp / "uploads", {});
  const auto a = png(8, 8, 1);
  CHECK_THROWS_AS(store.put("not an image", "image"), Error);
  CHECK_FALSE(fs::exists(tmp / "uploads"));  // nothing written for a bad image
  const auto first = store.put(a, "image");
  CHECK(first == tmp.path() / "uploads" / (image_sha256(a) + ".png"));
  CHECK(first.is_absolute());
  const auto second = store.put(a, "last_image");
  CHECK(second == first);
  CHECK(test::listing(tmp / "uploads").size() == 1);
  CHECK(store.pinned(first) == 2);
  try {
    store.put(png(8, 8, 1).substr(0, 30), "last_image");
    FAIL("a truncated upload was stored");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).starts_with("last_image: "));
  }
  store.unpin(first);
  CHECK(fs::exists(first));  // still used once
  store.unpin(first);
  CHECK_FALSE(fs::exists(first));  // the last use removes it
  store.unpin(first);              // more unpins than pins: nothing happens
  store.unpin("/etc/hosts");       // not an upload: ignored
  CHECK(fs::exists("/etc/hosts"));
}

TEST_CASE("sweep at start-up keeps what resumed jobs pinned and removes the rest") {
  test::TempDir tmp;
  fs::path kept, dropped;
  {
    UploadStore before_crash(tmp / "uploads", {});
    kept = before_crash.put(png(8, 8, 1), "image");
    dropped = before_crash.put(png(8, 8, 2), "image");
    std::ofstream(tmp / "uploads" / ".x.png.tmp-1-abc") << "half";
  }  // the process dies with both pinned
  UploadStore after(tmp / "uploads", {});
  after.pin(kept);  // a resumed job's image
  CHECK(after.sweep() == 2);
  CHECK(fs::exists(kept));
  CHECK_FALSE(fs::exists(dropped));
  CHECK(test::listing(tmp / "uploads").size() == 1);
  UploadStore missing(tmp / "never-made", {});
  CHECK(missing.sweep() == 0);
}

TEST_CASE("concurrent puts of one picture store one file and count every use" * doctest::timeout(60)) {
  test::TempDir tmp;
  UploadStore store(tmp / "uploads", {});
  const auto a = png(16, 16, 3);
  std::vector<std::thread> threads;
  std::vector<fs::path> paths(4);
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { paths[i] = store.put(a, "image"); });
  for (auto& t : threads) t.join();
  for (const auto& p : paths) CHECK(p == paths[0]);
  CHECK(store.pinned(paths[0]) == 4);
  CHECK(test::listing(tmp / "uploads").size() == 1);
}

TEST_CASE("put_video: decoded in a temporary, named by content, and nothing left of a refused one") {
  test::TempDir tmp;
  const auto clip = tmp / "clip.mp4";
  encode_to_file(make_test_pattern(32, 32, 5, 8.0, 1), clip, {.format = "mp4"});
  std::ifstream in(clip, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  UploadStore store(tmp / "uploads", {}, VideoLimits{.max_bytes = 1 << 20, .max_frames = 8});

  for (const std::string& bad : {std::string("not a video at all"), bytes.substr(0, bytes.size() / 2), std::string()}) {
    try {
      store.put_video(bad, "video");
      FAIL("a bad video was stored");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      const std::string what = e.what();
      CHECK(what.starts_with("video: "));
      CHECK(what.find((tmp / "uploads").string()) == std::string::npos);  // no server path in the message
    }
    CHECK(test::listing(tmp / "uploads").empty());  // the temporary went too
  }
  UploadStore strict(tmp / "uploads", {}, VideoLimits{.max_frames = 4});
  CHECK_THROWS_WITH_AS(strict.put_video(bytes, "video"), doctest::Contains("more than 4 frames"), Error);
  CHECK(test::listing(tmp / "uploads").empty());

  const auto first = store.put_video(bytes, "video");
  CHECK(first == tmp.path() / "uploads" / (image_sha256(bytes) + ".mp4"));
  CHECK(store.put_video(bytes, "video") == first);
  CHECK(test::listing(tmp / "uploads").size() == 1);
  CHECK(store.pinned(first) == 2);
  store.unpin(first);
  store.unpin(first);
  CHECK_FALSE(fs::exists(first));

  CHECK(decode_video_text("data:video/mp4;base64," + base64(bytes), "video", 1 << 20) == bytes);
  CHECK_THROWS_WITH_AS(decode_video_text("/etc/passwd", "video", 1 << 20), doctest::Contains("not a path"), Error);
  CHECK_THROWS_WITH_AS(decode_video_text(base64(bytes), "video", 100), doctest::Contains("video: larger than 100 bytes"), Error);
}

TEST_CASE("the upload fields of a spec: read from JSON or multipart parts, their paths put back") {
  CHECK(is_upload_field("image"));
  CHECK(is_upload_field("reference_images"));
  CHECK_FALSE(is_upload_field("spec"));
  CHECK(is_video_upload_field("mask_video"));
  CHECK_FALSE(is_video_upload_field("last_image"));
  const auto a = png(4, 4, 1), b = png(4, 4, 2);
  auto thrown = [](auto&& f) -> std::string {
    try {
      f();
      return "";
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      return e.what();
    }
  };

  // JSON: images and reference images decoded in order; a field of another type is validation's.
  boost::json::object spec{{"prompt", "p"}, {"image", base64(a)}, {"last_image", 3},
                           {"reference_images", boost::json::array{boost::json::value(base64(b)), boost::json::value(base64(a))}}};
  const UploadBytes want{{"image", a}, {"reference_images", b}, {"reference_images", a}};
  CHECK(json_uploads(spec, 1 << 20, 1 << 20) == want);
  spec["reference_images"].as_array().push_back(7);
  CHECK(thrown([&] { json_uploads(spec, 1 << 20, 1 << 20); }).rfind("reference_images[2]: must be an image", 0) == 0);

  // Multipart: the parts named by upload fields, size-checked per kind, never a field given twice.
  const std::vector<MultipartPart> parts{{"spec", "", "", "{}"}, {"reference_images", "r.png", "", b},
                                         {"image", "i.png", "", a}, {"reference_images", "s.png", "", a}};
  const boost::json::object empty;
  CHECK(multipart_uploads(empty, parts, 1 << 20, 1 << 20) == want);
  CHECK(thrown([&] { multipart_uploads(empty, parts, 10, 1 << 20); }).rfind("image: larger than 10 bytes", 0) == 0);
  CHECK(thrown([&] { multipart_uploads(boost::json::object{{"image", "x"}}, parts, 1 << 20, 1 << 20); })
            .rfind("image: given twice", 0) == 0);
  CHECK(thrown([&] { multipart_uploads(boost::json::object{{"reference_images", 1}}, parts, 1 << 20, 1 << 20); })
            .rfind("reference_images: given twice", 0) == 0);
  const std::vector<MultipartPart> video{{"video", "v.mp4", "", "0123456789"}};
  CHECK(multipart_uploads(empty, video, 1 << 20, 10).size() == 1);  // the video limit, not the image one
  CHECK(thrown([&] { multipart_uploads(empty, video, 1 << 20, 9); }).rfind("video: larger than 9 bytes", 0) == 0);

  // Paths back: plain fields set, reference images one array in order replacing what was there.
  const auto with = with_upload_paths(spec, {{"image", "/u/a.png"}, {"reference_images", "/u/b.png"}, {"reference_images", "/u/a.png"}});
  CHECK(with.at("image") == "/u/a.png");
  CHECK(with.at("reference_images") == boost::json::array{boost::json::value("/u/b.png"), boost::json::value("/u/a.png")});
  CHECK(with.at("last_image") == 3);
  CHECK(with_upload_paths(empty, {}).empty());
}
