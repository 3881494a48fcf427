#include "stages/media/fragment_tap.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "stages/media/encode.hpp"
#include "stages/media/frames.hpp"

namespace {

namespace fs = std::filesystem;
using vgen::LiveBroadcast;
using vgen::test::TempDir;

std::string run(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  REQUIRE_MESSAGE(ok, command);
  return out;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Decoded frames of a file, counted by ffprobe.
int frames_in(const fs::path& p) {
  return std::stoi(run("ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 '" +
                       p.string() + "'"));
}

// Top-level box types of an MP4 held in `bytes`.
std::vector<std::string> boxes(const std::string& bytes) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at + 8 <= bytes.size();) {
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data() + at);
    const std::size_t size = (std::size_t{b[0]} << 24) | (std::size_t{b[1]} << 16) | (std::size_t{b[2]} << 8) | b[3];
    out.emplace_back(bytes.data() + at + 4, 4);
    if (size < 8) break;
    at += size;
  }
  return out;
}

std::string joined(const LiveBroadcast& b) {
  std::string all;
  for (const auto& s : b.read_from(0).segments) all += *s;
  return all;
}

// The codec types of a file's streams, in order ("video", "audio").
std::string stream_types(const fs::path& p) {
  std::string out = run("ffprobe -v error -show_entries stream=codec_type,codec_name -of csv=p=0 '" + p.string() + "'");
  return out;
}

// Decoded audio samples (mono, at the stream's own rate) of a file, counted from ffmpeg's PCM.
std::size_t audio_samples_in(const fs::path& p) {
  return run("ffmpeg -v error -i '" + p.string() + "' -map 0:a -f s16le -ac 1 -").size() / 2;
}

// The stream's first segments, up to the init segment and a fragment (what a client has early
// on), written to `file`.
void write_early_fragments(const std::vector<std::shared_ptr<const std::string>>& segments, const fs::path& file) {
  std::string early;
  for (std::size_t i = 0; i < segments.size() && boxes(early).size() < 4; ++i) early += *segments[i];
  write_file(file, early);
}

vgen::AudioTrack tone(int rate, double seconds) {
  vgen::AudioTrack t{.sample_rate = rate, .channels = 1, .samples = {}};
  const auto n = static_cast<std::size_t>(std::lround(seconds * rate));
  for (std::size_t i = 0; i < n; ++i) t.samples.push_back(0.5f * static_cast<float>(std::sin(2 * M_PI * 440.0 * double(i) / rate)));
  return t;
}

vgen::EncodeOptions mp4() {
  vgen::EncodeOptions o;
  o.format = "mp4";
  return o;
}

}  // namespace

TEST_CASE("with a live broadcast the file is the same bytes, and the broadcast is a playable fragmented mp4") {
  const auto frames = vgen::make_test_pattern(64, 48, 49, 16.0, 3);  // 3 s at 16 fps: several fragments
  TempDir dir;
  vgen::encode_to_file(frames, nullptr, dir / "plain.mp4", mp4(), nullptr);
  LiveBroadcast live;
  vgen::encode_to_file(frames, nullptr, dir / "live.mp4", mp4(), &live);
  CHECK(read_file(dir / "plain.mp4") == read_file(dir / "live.mp4"));
  CHECK(live.end() == LiveBroadcast::End::open);  // its owner ends it once the file is in place

  const auto segments = live.read_from(0).segments;
  const std::string bytes = joined(live);
  const auto top = boxes(bytes);
  REQUIRE(top.size() >= 4);
  CHECK(top[0] == "ftyp");
  CHECK(top[1] == "moov");
  CHECK(std::count(top.begin(), top.end(), "moof") >= 3);  // a fragment about every half second
  // The init segment is a segment of its own, so a client gets it before any frame is encoded.
  INFO("first segment: " << segments.front()->size() << " bytes, boxes " << boxes(*segments.front()).size() << ", first " << boxes(*segments.front()).front());
  CHECK(boxes(*segments.front()) == std::vector<std::string>{"ftyp", "moov"});
  write_file(dir / "stream.mp4", bytes);
  CHECK(frames_in(dir / "stream.mp4") == 49);

  // The first fragments alone (what a client has early on) already decode to frames.
  write_early_fragments(segments, dir / "early.mp4");
  const int early_frames = frames_in(dir / "early.mp4");
  CHECK(early_frames > 0);
  CHECK(early_frames < 49);
}

TEST_CASE("formats that cannot stream ignore the broadcast") {
  CHECK(vgen::streams_live("mp4"));
  CHECK_FALSE(vgen::streams_live("webm"));
  CHECK_FALSE(vgen::streams_live("gif"));
  const auto frames = vgen::make_test_pattern(64, 48, 5, 16.0, 1);
  TempDir dir;
  LiveBroadcast live;
  auto options = mp4();
  options.format = "gif";
  vgen::encode_to_file(frames, nullptr, dir / "clip.gif", options, &live);
  CHECK_FALSE(live.started());
  CHECK(fs::exists(dir / "clip.gif"));
}

TEST_CASE("an ended broadcast does not stop the encode") {
  const auto frames = vgen::make_test_pattern(64, 48, 17, 16.0, 1);
  TempDir dir;
  LiveBroadcast live(100);  // too small for the init segment: ended at once
  vgen::encode_to_file(frames, nullptr, dir / "clip.mp4", mp4(), &live);
  CHECK(live.end() == LiveBroadcast::End::truncated);  // cut by its cap: readers see an error
  vgen::encode_to_file(frames, nullptr, dir / "plain.mp4", mp4(), nullptr);
  CHECK(read_file(dir / "clip.mp4") == read_file(dir / "plain.mp4"));
}

TEST_CASE("with sound the live stream has both tracks in its fragments, and the file is the unwatched bytes") {
  const auto frames = vgen::make_test_pattern(64, 48, 49, 16.0, 3);  // 3 s at 16 fps
  const auto sound = tone(16000, 49 / 16.0);
  TempDir dir;
  vgen::encode_to_file(frames, &sound, dir / "plain.mp4", mp4(), nullptr);
  LiveBroadcast live;
  vgen::encode_to_file(frames, &sound, dir / "live.mp4", mp4(), &live);
  CHECK(read_file(dir / "plain.mp4") == read_file(dir / "live.mp4"));

  const auto segments = live.read_from(0).segments;
  CHECK(boxes(*segments.front()) == std::vector<std::string>{"ftyp", "moov"});
  write_file(dir / "init.mp4", *segments.front());
  CHECK(stream_types(dir / "init.mp4") == "h264,video\naac,audio\n");  // the init segment names both tracks
  const std::string bytes = joined(live);
  write_file(dir / "stream.mp4", bytes);
  CHECK(frames_in(dir / "stream.mp4") == 49);
  // All the sound: the file's samples plus the AAC encoder's 1024 priming samples, which the
  // file hides with an edit list. A fragmented mp4 written as it goes has no edit list (its moov
  // leaves before the first packet), so the muxer shifts both tracks to start at 0 instead and
  // the priming plays (as near-silence) before the first frame.
  const auto streamed = audio_samples_in(dir / "stream.mp4");
  const auto filed = audio_samples_in(dir / "plain.mp4");
  INFO("streamed " << streamed << " samples, file " << filed << ", track " << sound.frames());
  CHECK(streamed == filed + 1024);
  CHECK(std::abs(static_cast<long>(filed) - static_cast<long>(sound.frames())) <= 1024);
  // Frame 0 (shown at its pts, after x264's B-frame delay) and the track's sample 0 (the audio
  // packet after the priming one) play at the same time.
  const auto first = [&](const char* stream, int packet) {
    const auto lines = run("ffprobe -v error -select_streams " + std::string(stream) + " -show_entries packet=pts_time -of csv=p=0 '" +
                           (dir / "stream.mp4").string() + "'");
    std::vector<double> pts;
    for (std::size_t at = 0; at < lines.size();) {
      const auto end = lines.find('\n', at);
      pts.push_back(std::stod(lines.substr(at, end - at)));
      at = end == std::string::npos ? lines.size() : end + 1;
    }
    std::sort(pts.begin(), pts.end());
    REQUIRE(pts.size() > std::size_t(packet));
    return pts[std::size_t(packet)];
  };
  CHECK(first("v:0", 0) == doctest::Approx(first("a:0", 1)).epsilon(1e-6));

  // Interleaved: the first fragments alone (what a client has early on) already hold sound and
  // frames, not all of either.
  write_early_fragments(segments, dir / "early.mp4");
  const int early_frames = frames_in(dir / "early.mp4");
  CHECK(early_frames > 0);
  CHECK(early_frames < 49);
  const auto early_samples = audio_samples_in(dir / "early.mp4");
  CHECK(early_samples > 0);
  CHECK(early_samples < sound.frames());
}
