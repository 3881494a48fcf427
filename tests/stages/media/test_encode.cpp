#include "stages/media/encode.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/errors.hpp"
#include "stages/media/frames.hpp"
#include "tests/support/tmpfs.hpp"

using vgen::test::TempDir;
using vgen::test::listing;

namespace {

namespace fs = std::filesystem;
using vgen::EncodeOptions;
using vgen::ErrorKind;
using vgen::VideoFrames;



struct CommandResult {
  int status = -1;
  std::string output;  // stdout only
};

CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[65536];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

// The value of "key" in ffprobe's JSON (one stream, so the first match is the only one).
std::string json_field(const std::string& json, const std::string& key) {
  std::smatch match;
  const std::regex pattern("\"" + key + "\"\\s*:\\s*\"?([^\",}\\n]*)\"?");
  return std::regex_search(json, match, pattern) ? match[1].str() : std::string("<missing>");
}

struct Probe {
  std::string codec, pix_fmt, color_primaries, frame_rate;
  int width = 0, height = 0, frames = 0;
};

Probe probe(const fs::path& file) {
  const CommandResult r = run_command(
      "ffprobe -v error -count_frames -show_entries "
      "stream=codec_name,width,height,r_frame_rate,nb_read_frames,pix_fmt,color_primaries -of "
      "json " +
      quoted(file));
  REQUIRE_MESSAGE(r.status == 0, "ffprobe failed on " << file);
  INFO("ffprobe: " << r.output);
  Probe p;
  p.codec = json_field(r.output, "codec_name");
  p.pix_fmt = json_field(r.output, "pix_fmt");
  p.color_primaries = json_field(r.output, "color_primaries");
  p.frame_rate = json_field(r.output, "r_frame_rate");
  p.width = std::atoi(json_field(r.output, "width").c_str());
  p.height = std::atoi(json_field(r.output, "height").c_str());
  p.frames = std::atoi(json_field(r.output, "nb_read_frames").c_str());
  return p;
}

// Every decoded frame of `file` as raw pixels in `pix_fmt`.
std::string decode_raw(const fs::path& file, const std::string& pix_fmt) {
  const CommandResult r =
      run_command("ffmpeg -v error -i " + quoted(file) +
                  " -fps_mode passthrough -f rawvideo -pix_fmt " + pix_fmt + " -");
  REQUIRE(r.status == 0);
  return r.output;
}

std::vector<std::uint8_t> read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& file, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// Types of the top-level ISO BMFF boxes, in file order.
std::vector<std::string> top_level_boxes(const std::vector<std::uint8_t>& bytes) {
  std::vector<std::string> types;
  std::size_t at = 0;
  while (at + 8 <= bytes.size()) {
    std::uint64_t size = 0;
    for (int i = 0; i < 4; ++i) size = size << 8 | bytes[at + i];
    types.emplace_back(reinterpret_cast<const char*>(&bytes[at + 4]), 4);
    if (size == 1 && at + 16 <= bytes.size()) {
      size = 0;
      for (int i = 8; i < 16; ++i) size = size << 8 | bytes[at + i];
    } else if (size == 0) {
      size = bytes.size() - at;
    }
    REQUIRE(size >= 8);
    at += size;
  }
  CHECK(at == bytes.size());
  return types;
}

std::ptrdiff_t index_of(const std::vector<std::string>& items, const std::string& item) {
  const auto it = std::find(items.begin(), items.end(), item);
  return it == items.end() ? -1 : it - items.begin();
}

EncodeOptions options_for(const std::string& format) {
  EncodeOptions options;
  options.format = format;
  return options;
}

template <typename Fn>
void check_error(Fn&& fn, ErrorKind kind, const std::vector<std::string>& words) {
  try {
    fn();
    FAIL("expected an error");
  } catch (const vgen::Error& e) {
    CHECK(e.kind() == kind);
    for (const auto& word : words) {
      CHECK_MESSAGE(std::string(e.what()).find(word) != std::string::npos, e.what());
    }
  }
}

const VideoFrames& clip() {
  static const VideoFrames frames = vgen::make_test_pattern(64, 48, 17, 16.0, 1);
  return frames;
}

}  // namespace

TEST_CASE("the registry names formats, content types and extensions") {
  const auto formats = vgen::encoder_formats();
  for (const char* name : {"gif", "mp4", "png", "webm"})
    CHECK(std::find(formats.begin(), formats.end(), name) != formats.end());
  CHECK(std::is_sorted(formats.begin(), formats.end()));
  CHECK(vgen::content_type_for("mp4") == "video/mp4");
  CHECK(vgen::content_type_for("webm") == "video/webm");
  CHECK(vgen::content_type_for("gif") == "image/gif");
  CHECK(vgen::content_type_for("png") == "image/png");
  CHECK(vgen::extension_for("mp4") == ".mp4");
  CHECK(vgen::extension_for("webm") == ".webm");
  CHECK(vgen::extension_for("gif") == ".gif");
  CHECK(vgen::extension_for("png") == "");
}

TEST_CASE("an unknown format is rejected with the known ones listed, and writes nothing") {
  TempDir dir;
  // The Registry's wording (runtime/registry.hpp), as for every by-name variant.
  const std::vector<std::string> words{"unknown output format 'avi' (known: ", "gif, mp4, png, webm"};
  check_error([] { vgen::content_type_for("avi"); }, ErrorKind::invalid_argument, words);
  check_error([] { vgen::extension_for("avi"); }, ErrorKind::invalid_argument, words);
  check_error([&] { vgen::encode_to_file(clip(), dir / "x.avi", options_for("avi")); },
              ErrorKind::invalid_argument, words);
  check_error([] { vgen::encode_to_memory(clip(), options_for("avi")); },
              ErrorKind::invalid_argument, words);
  CHECK(listing(dir.path()).empty());
}

namespace {

// A registered format outside encode.cpp: the raw RGB bytes, optionally failing half-way.
struct RawEncoder final : vgen::FormatEncoder {
  RawEncoder(std::string name, bool fail_halfway)
      : FormatEncoder({std::move(name), "application/octet-stream", ".rgb"}), fail_halfway_(fail_halfway) {}
  void check(const VideoFrames& frames, const EncodeOptions&) const override {
    if (frames.count > 100) throw vgen::Error(ErrorKind::invalid_argument, "raw takes at most 100 frames");
  }
  void write_file(const VideoFrames& frames, const fs::path& path, const EncodeOptions&) const override {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(frames.rgb.data()), static_cast<std::streamsize>(frames.rgb.size() / 2));
    out.flush();
    if (fail_halfway_) throw vgen::Error(ErrorKind::internal, "raw encoder gave up");
    out.write(reinterpret_cast<const char*>(frames.rgb.data() + frames.rgb.size() / 2),
              static_cast<std::streamsize>(frames.rgb.size() - frames.rgb.size() / 2));
  }
  std::vector<std::uint8_t> write_memory(const VideoFrames& frames, const EncodeOptions&) const override {
    return frames.rgb;
  }
  bool fail_halfway_;
};

}  // namespace

TEST_CASE("a registered encoder is chosen by name like the built-ins, and writes atomically") {
  vgen::register_encoder(std::make_shared<RawEncoder>("test_raw", false));
  vgen::register_encoder(std::make_shared<RawEncoder>("test_raw_failing", true));
  const auto formats = vgen::encoder_formats();
  CHECK(std::find(formats.begin(), formats.end(), "test_raw") != formats.end());
  CHECK(vgen::content_type_for("test_raw") == "application/octet-stream");
  CHECK(vgen::extension_for("test_raw") == ".rgb");
  CHECK(vgen::encode_to_memory(clip(), options_for("test_raw")) == clip().rgb);
  TempDir dir;
  vgen::encode_to_file(clip(), dir / "clip.rgb", options_for("test_raw"));
  CHECK(read_bytes(dir / "clip.rgb") == clip().rgb);
  // A failure half-way leaves the previous output whole and no temporary.
  check_error([&] { vgen::encode_to_file(vgen::make_test_pattern(64, 48, 3, 16.0, 2), dir / "clip.rgb",
                                         options_for("test_raw_failing")); },
              ErrorKind::internal, {"gave up"});
  CHECK(read_bytes(dir / "clip.rgb") == clip().rgb);
  CHECK(listing(dir.path()) == std::vector<std::string>{"clip.rgb"});
  // Its check() runs like the built-ins' (before anything is written).
  check_error([&] { vgen::encode_to_file(vgen::make_test_pattern(8, 8, 101, 16.0, 2), dir / "long.rgb",
                                         options_for("test_raw")); },
              ErrorKind::invalid_argument, {"at most 100"});
  CHECK(listing(dir.path()) == std::vector<std::string>{"clip.rgb"});

  check_error([] { vgen::register_encoder(std::make_shared<RawEncoder>("mp4", false)); },
              ErrorKind::invalid_argument, {"output format 'mp4' is already registered"});
  check_error([] { vgen::register_encoder(nullptr); }, ErrorKind::invalid_argument, {"encoder"});
  check_error([] { vgen::register_encoder(std::make_shared<RawEncoder>("", false)); },
              ErrorKind::invalid_argument, {"needs a name"});
  CHECK(vgen::content_type_for("mp4") == "video/mp4");  // the built-in stays
}

TEST_CASE("mp4 file: h264 yuv420p, BT.709, 17 frames at 16 fps, moov before mdat") {
  TempDir dir;
  const fs::path out = dir / "clip.mp4";
  vgen::encode_to_file(clip(), out, options_for("mp4"));
  CHECK(listing(dir.path()) == std::vector<std::string>{"clip.mp4"});  // no temp left behind
  const Probe p = probe(out);
  CHECK(p.codec == "h264");
  CHECK(p.width == 64);
  CHECK(p.height == 48);
  CHECK(p.frame_rate == "16/1");
  CHECK(p.frames == 17);
  CHECK(p.pix_fmt == "yuv420p");
  CHECK(p.color_primaries == "bt709");
  const auto boxes = top_level_boxes(read_bytes(out));
  INFO("boxes: " << boxes.size());
  REQUIRE(index_of(boxes, "moov") >= 0);
  REQUIRE(index_of(boxes, "mdat") >= 0);
  CHECK(index_of(boxes, "moov") < index_of(boxes, "mdat"));
}

TEST_CASE("mp4 converts RGB with BT.709 into limited range") {
  // Pure red: BT.709 gives Y = 16 + 219 * 0.2126 = 63, Cb = 128 - 112 * 0.2126 / 0.9278 = 102
  // (BT.601 would give Y 82, Cb 90); white is Y 235, black Y 16.
  VideoFrames frames = VideoFrames::allocate(32, 32, 3, 16.0);
  const std::uint8_t colours[3][3] = {{255, 0, 0}, {255, 255, 255}, {0, 0, 0}};
  for (int f = 0; f < 3; ++f) {
    for (std::size_t i = 0; i < frames.frame_bytes(); i += 3)
      std::copy(colours[f], colours[f] + 3, frames.frame(f) + i);
  }
  TempDir dir;
  EncodeOptions options = options_for("mp4");
  options.crf = 10;
  vgen::encode_to_file(frames, dir / "solid.mp4", options);
  const std::string yuv = decode_raw(dir / "solid.mp4", "yuv420p");
  const std::size_t frame_size = 32 * 32 * 3 / 2;
  REQUIRE(yuv.size() == 3 * frame_size);
  auto y_of = [&](int f) {
    return static_cast<int>(static_cast<std::uint8_t>(yuv[f * frame_size + 32 * 16 + 16]));
  };
  auto cb_of = [&](int f) {
    return static_cast<int>(static_cast<std::uint8_t>(yuv[f * frame_size + 32 * 32 + 16 * 8 + 8]));
  };
  CHECK(std::abs(y_of(0) - 63) <= 2);
  CHECK(std::abs(cb_of(0) - 102) <= 2);
  CHECK(std::abs(y_of(1) - 235) <= 2);
  CHECK(std::abs(y_of(2) - 16) <= 2);
}

TEST_CASE("mp4 keeps a fractional frame rate exact") {
  TempDir dir;
  const VideoFrames frames = vgen::make_test_pattern(64, 48, 9, 24000.0 / 1001.0, 3);
  vgen::encode_to_file(frames, dir / "ntsc.mp4", options_for("mp4"));
  const Probe p = probe(dir / "ntsc.mp4");
  CHECK(p.frame_rate == "24000/1001");
  CHECK(p.frames == 9);
}

TEST_CASE("webm file: vp9, 17 frames at 16 fps") {
  TempDir dir;
  vgen::encode_to_file(clip(), dir / "clip.webm", options_for("webm"));
  CHECK(listing(dir.path()) == std::vector<std::string>{"clip.webm"});
  const Probe p = probe(dir / "clip.webm");
  CHECK(p.codec == "vp9");
  CHECK(p.width == 64);
  CHECK(p.height == 48);
  CHECK(p.frame_rate == "16/1");
  CHECK(p.frames == 17);
  CHECK(p.pix_fmt == "yuv420p");
  CHECK(p.color_primaries == "bt709");
}

// The longest run of frames from one keyframe to the next (or to the end), in display order.
int longest_keyframe_gap(const fs::path& file) {
  const CommandResult r = run_command("ffprobe -v error -select_streams v:0 -show_entries frame=key_frame -of csv=p=0 " +
                                      quoted(file));
  REQUIRE(r.status == 0);
  INFO("key_frame flags: " << r.output);
  int longest = 0, run = 0, frames = 0;
  for (std::size_t at = 0; at < r.output.size(); ++at) {
    if (r.output[at] != '0' && r.output[at] != '1') continue;
    if (r.output[at] == '1') run = 0;
    longest = std::max(longest, ++run);
    ++frames;
  }
  CHECK(frames == 33);
  return longest;
}

TEST_CASE("keyframe_interval_s bounds the frames between keyframes (mp4 and webm)") {
  TempDir dir;
  const VideoFrames frames = vgen::make_test_pattern(64, 48, 33, 16.0, 1);
  for (const std::string format : {"mp4", "webm"}) {
    CAPTURE(format);
    EncodeOptions options = options_for(format);
    vgen::encode_to_file(frames, dir / ("default." + format), options);
    CHECK(longest_keyframe_gap(dir / ("default." + format)) > 4);  // 2 s: 32 frames at 16 fps
    options.keyframe_interval_s = 0.25;                             // 4 frames
    vgen::encode_to_file(frames, dir / ("short." + format), options);
    CHECK(longest_keyframe_gap(dir / ("short." + format)) <= 4);
    options.keyframe_interval_s = 0.001;  // below 0.01 s: refused, as is > 3600 s
    check_error([&] { vgen::encode_to_memory(frames, options); }, ErrorKind::invalid_argument, {"keyframe_interval_s"});
  }
}

TEST_CASE("gif file: 17 paletted frames that decode close to the source") {
  TempDir dir;
  vgen::encode_to_file(clip(), dir / "clip.gif", options_for("gif"));
  CHECK(listing(dir.path()) == std::vector<std::string>{"clip.gif"});
  const Probe p = probe(dir / "clip.gif");
  CHECK(p.codec == "gif");
  CHECK(p.width == 64);
  CHECK(p.height == 48);
  CHECK(p.frames == 17);
  // Frames after the first use the transparent index for unchanged pixels: decoding must
  // still give back every frame exactly as the clip's palette quantises it.
  const std::string rgb = decode_raw(dir / "clip.gif", "rgb24");
  REQUIRE(rgb.size() == clip().rgb.size());
  const vgen::ClipPalette palette = vgen::ClipPalette::build(clip(), 255);
  std::size_t mismatches = 0;
  double error = 0;
  for (std::size_t i = 0; i < rgb.size(); i += 3) {
    const std::uint32_t colour = palette.colours()[palette.index_of(&clip().rgb[i])];
    for (int c = 0; c < 3; ++c) {
      const int decoded = static_cast<std::uint8_t>(rgb[i + c]);
      mismatches += decoded != static_cast<int>((colour >> (16 - 8 * c)) & 0xff);
      error += std::abs(decoded - clip().rgb[i + c]);
    }
  }
  CHECK(mismatches == 0);
  // This clip has ~50,000 colours spread evenly over a wide cube: 255 entries leave an error
  // of about 10 per channel; natural video does much better.
  error /= static_cast<double>(rgb.size());
  CHECK(error < 12.0);
}

TEST_CASE("gif accepts odd sizes") {
  TempDir dir;
  vgen::encode_to_file(vgen::make_test_pattern(63, 47, 5, 10.0, 2), dir / "odd.gif",
                       options_for("gif"));
  const Probe p = probe(dir / "odd.gif");
  CHECK(p.width == 63);
  CHECK(p.height == 47);
  CHECK(p.frames == 5);
}

TEST_CASE("png: a directory of lossless frames") {
  TempDir dir;
  const fs::path out = dir / "frames";
  vgen::encode_to_file(clip(), out, options_for("png"));
  CHECK(listing(dir.path()) == std::vector<std::string>{"frames"});
  const auto files = listing(out);
  REQUIRE(files.size() == 17);
  CHECK(files.front() == "frame_00000.png");
  CHECK(files.back() == "frame_00016.png");
  const Probe p = probe(out / "frame_00000.png");
  CHECK(p.codec == "png");
  CHECK(p.width == 64);
  CHECK(p.height == 48);
  CHECK(p.pix_fmt == "rgb24");
  CHECK(probe(out / "frame_%05d.png").frames == 17);
  const std::string rgb = decode_raw(out / "frame_00005.png", "rgb24");
  CHECK(std::equal(rgb.begin(), rgb.end(), clip().frame(5), clip().frame(5) + clip().frame_bytes(),
                   [](char a, std::uint8_t b) { return static_cast<std::uint8_t>(a) == b; }));
}

TEST_CASE("png: frames are deflated at zlib's fastest level") {
  TempDir dir;
  vgen::encode_to_file(clip(), dir / "frames", options_for("png"));
  std::ifstream in(dir / "frames" / "frame_00000.png", std::ios::binary);
  const std::string png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto idat = png.find("IDAT");
  REQUIRE(idat != std::string::npos);
  REQUIRE(png.size() > idat + 6);
  // The zlib stream's header (RFC 1950): CMF 0x78, then FLG whose top two bits are the level
  // class: 0 for level 1 ("fastest"), 2 for the default level 6 FFmpeg would use otherwise.
  CHECK(static_cast<std::uint8_t>(png[idat + 4]) == 0x78);
  CHECK((static_cast<std::uint8_t>(png[idat + 5]) >> 6) == 0);
}

TEST_CASE("an existing output is replaced whole") {
  TempDir dir;
  vgen::encode_to_file(clip(), dir / "clip.mp4", options_for("mp4"));
  vgen::encode_to_file(vgen::make_test_pattern(64, 48, 5, 16.0, 9), dir / "clip.mp4",
                       options_for("mp4"));
  CHECK(probe(dir / "clip.mp4").frames == 5);
  vgen::encode_to_file(clip(), dir / "frames", options_for("png"));
  vgen::encode_to_file(vgen::make_test_pattern(64, 48, 3, 16.0, 9), dir / "frames",
                       options_for("png"));
  CHECK(listing(dir / "frames").size() == 3);
  // image2 expands %d in its file pattern: a '%' in the directory name must survive.
  vgen::encode_to_file(vgen::make_test_pattern(64, 48, 2, 16.0, 9), dir / "100%d",
                       options_for("png"));
  CHECK(listing(dir / "100%d") == std::vector<std::string>{"frame_00000.png", "frame_00001.png"});
  CHECK(listing(dir.path()) == std::vector<std::string>{"100%d", "clip.mp4", "frames"});
}

TEST_CASE("fragmented mp4 in memory") {
  const std::vector<std::uint8_t> bytes = vgen::encode_to_memory(clip(), options_for("mp4"));
  const auto boxes = top_level_boxes(bytes);
  CHECK(index_of(boxes, "moov") >= 0);
  CHECK(index_of(boxes, "moof") > index_of(boxes, "moov"));
  TempDir dir;
  write_bytes(dir / "memory.mp4", bytes);
  const Probe p = probe(dir / "memory.mp4");
  CHECK(p.codec == "h264");
  CHECK(p.frames == 17);
  CHECK(p.frame_rate == "16/1");
  CHECK(p.color_primaries == "bt709");
}

TEST_CASE("webm and gif in memory") {
  TempDir dir;
  for (const std::string format : {"webm", "gif"}) {
    CAPTURE(format);
    const fs::path file = dir / ("memory." + format);
    write_bytes(file, vgen::encode_to_memory(clip(), options_for(format)));
    const Probe p = probe(file);
    CHECK(p.codec == (format == "webm" ? "vp9" : "gif"));
    CHECK(p.frames == 17);
  }
  check_error([] { vgen::encode_to_memory(clip(), options_for("png")); },
              ErrorKind::invalid_argument, {"png", "memory"});
}

TEST_CASE("odd sizes for yuv420p formats are rejected before anything is written") {
  TempDir dir;
  for (const std::string format : {"mp4", "webm"}) {
    CAPTURE(format);
    for (auto [w, h] : {std::pair{63, 48}, std::pair{64, 47}}) {
      const VideoFrames odd = vgen::make_test_pattern(w, h, 3, 16.0, 1);
      check_error(
          [&] {
            vgen::encode_to_file(odd, dir / ("odd" + vgen::extension_for(format)),
                                 options_for(format));
          },
          ErrorKind::invalid_argument, {"width", "height", "even"});
      check_error([&] { vgen::encode_to_memory(odd, options_for(format)); },
                  ErrorKind::invalid_argument, {"even"});
    }
  }
  CHECK(listing(dir.path()).empty());
}

TEST_CASE("bad options and bad frames are rejected") {
  TempDir dir;
  EncodeOptions options = options_for("mp4");
  options.crf = 52;
  check_error([&] { vgen::encode_to_file(clip(), dir / "a.mp4", options); },
              ErrorKind::invalid_argument, {"crf"});
  options.crf = 23;
  options.preset = "warp";
  check_error([&] { vgen::encode_to_file(clip(), dir / "a.mp4", options); },
              ErrorKind::invalid_argument, {"preset", "warp"});
  options.preset = "veryfast";
  options.threads = 0;
  check_error([&] { vgen::encode_to_file(clip(), dir / "a.mp4", options); },
              ErrorKind::invalid_argument, {"threads"});
  VideoFrames broken = clip();
  broken.rgb.resize(10);
  check_error([&] { vgen::encode_to_file(broken, dir / "a.mp4", options_for("mp4")); },
              ErrorKind::invalid_argument, {"rgb"});
  EncodeOptions webm = options_for("webm");
  webm.crf = 64;
  check_error([&] { vgen::encode_to_memory(clip(), webm); }, ErrorKind::invalid_argument, {"crf"});
  CHECK(listing(dir.path()).empty());
}

TEST_CASE("a missing output directory is an error and creates nothing") {
  TempDir dir;
  check_error(
      [&] { vgen::encode_to_file(clip(), dir / "missing" / "clip.mp4", options_for("mp4")); },
      ErrorKind::invalid_argument, {"does not exist", "missing"});
  check_error([&] { vgen::encode_to_file(clip(), dir / "missing" / "frames", options_for("png")); },
              ErrorKind::invalid_argument, {"does not exist"});
  CHECK(listing(dir.path()).empty());
}

TEST_CASE("a failure after encoding removes the temporary and leaves the target as it was") {
  // The target is a non-empty directory, so renaming the finished mp4 onto it fails.
  TempDir dir;
  fs::create_directory(dir / "taken.mp4");
  write_bytes(dir / "taken.mp4" / "keep.txt", {'k'});
  check_error([&] { vgen::encode_to_file(clip(), dir / "taken.mp4", options_for("mp4")); },
              ErrorKind::internal, {"taken.mp4"});
  CHECK(listing(dir.path()) == std::vector<std::string>{"taken.mp4"});
  CHECK(listing(dir / "taken.mp4") == std::vector<std::string>{"keep.txt"});
  // And a png directory cannot replace a file.
  write_bytes(dir / "file", {'f'});
  check_error([&] { vgen::encode_to_file(clip(), dir / "file", options_for("png")); },
              ErrorKind::internal, {"file"});
  CHECK(listing(dir.path()) == std::vector<std::string>{"file", "taken.mp4"});
  CHECK(read_bytes(dir / "file") == std::vector<std::uint8_t>{'f'});
}

TEST_CASE("a libav failure is internal, names the step and leaves nothing") {
  // The temporary's name (".<name>.tmp-<12 hex>") exceeds NAME_MAX, so opening it fails
  // inside libav after the muxer was set up.
  TempDir dir;
  const std::string name = std::string(240, 'n') + ".mp4";
  check_error([&] { vgen::encode_to_file(clip(), dir / name, options_for("mp4")); },
              ErrorKind::internal, {"opening", "too long"});
  check_error([&] { vgen::encode_to_file(clip(), dir / name, options_for("png")); },
              ErrorKind::internal, {"creating", "too long"});
  CHECK(listing(dir.path()).empty());
}

TEST_CASE("a full disk is transient and leaves neither a partial output nor a temporary") {
  vgen::test::TinyTmpfs disk(64 * 1024);
  if (!disk.mounted()) {
    MESSAGE("skipped: cannot mount a tmpfs here (" << disk.reason() << "); run as root to test ENOSPC");
    return;
  }
  // 33 frames of 256x256 noise-like pattern: far more than 64 KiB in every format.
  const VideoFrames big = vgen::make_test_pattern(256, 256, 33, 16.0, 5);
  for (const std::string format : {"mp4", "gif", "png"}) {
    CAPTURE(format);
    EncodeOptions options = options_for(format);
    options.crf = 0;
    const fs::path out = disk.path() / ("clip" + vgen::extension_for(format));
    check_error([&] { vgen::encode_to_file(big, out, options); }, ErrorKind::transient,
                {"No space left on device"});
    CHECK(listing(disk.path()).empty());
  }
  // The space came back: a small encode fits.
  vgen::encode_to_file(vgen::make_test_pattern(32, 32, 2, 16.0, 5), disk.path() / "small.gif", options_for("gif"));
  CHECK(listing(disk.path()) == std::vector<std::string>{"small.gif"});
}

TEST_CASE("concurrent encodes are independent and deterministic" * doctest::timeout(300)) {
  const std::vector<std::uint8_t> expected = vgen::encode_to_memory(clip(), options_for("mp4"));
  for (int workers : {2, 4}) {
    CAPTURE(workers);
    std::vector<std::vector<std::uint8_t>> results(workers);
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        results[w] = vgen::encode_to_memory(clip(), options_for(w % 2 == 0 ? "mp4" : "gif"));
      });
    }
    for (auto& t : threads) t.join();
    for (int w = 0; w < workers; w += 2) CHECK(results[w] == expected);
    for (int w = 1; w < workers; w += 2) CHECK(results[w] == results[1]);
  }
}

TEST_CASE("timing: 17 frames of 256x256 to mp4") {
  const VideoFrames frames = vgen::make_test_pattern(256, 256, 17, 16.0, 4);
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  vgen::encode_to_file(frames, dir / "timing.mp4", options_for("mp4"));
  const auto ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("17 frames 256x256 mp4 (veryfast, crf 23, 1 thread): " << ms << " ms");
  CHECK(probe(dir / "timing.mp4").frames == 17);
}
