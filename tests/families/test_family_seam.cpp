// The family seam: every test-only family under tests/families/ (each its own folder, declared
// with vgen_family(... TEST_ONLY)) registers under its manifest name(s) and renders a job end
// to end through vgen::Runtime: package loading, validation, the batcher's groups, decode and
// the encoder, with no other file of the tree naming it.
#include "api/engine.hpp"
#include "stages/families/family.hpp"
#include "stages/media/probe.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <set>

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace vgen;

namespace vgen {
void register_test_families();  // generated from tests/families/*/ (cmake/family.cmake)
}

namespace {

// The names the test-only families added to the registry (beside the built-ins).
std::vector<std::string> test_family_names() {
  register_builtin_families();
  const auto before = families().names();
  register_test_families();
  std::vector<std::string> added;
  for (const auto& name : families().names())
    if (std::find(before.begin(), before.end(), name) == before.end()) added.push_back(name);
  return added;
}

// The bundled package's files under the family's name: a package the family can load.
fs::path package_for(const std::string& family, const fs::path& dir, const json::object& extra = {}) {
  const fs::path bundled = fs::path(VGEN_TEST_SOURCE_DIR) / "models" / "vgen-shapes";
  fs::copy(bundled, dir, fs::copy_options::recursive);
  std::ifstream in(dir / "manifest.json");
  auto manifest = json::parse(std::string(std::istreambuf_iterator<char>(in), {})).as_object();
  manifest["family"] = family;
  for (const auto& [k, v] : extra) manifest[k] = v;
  std::ofstream(dir / "manifest.json", std::ios::trunc) << json::serialize(manifest);
  return dir;
}

}  // namespace

TEST_CASE("every test-only family renders a job through the Runtime" * doctest::timeout(300)) {
  const auto names = test_family_names();
  REQUIRE_MESSAGE(!names.empty(), "tests/families/ declares families, but none registered a name");
  for (const auto& name : names) {
    CAPTURE(name);
    const test::TempDir root("vgen-family-seam-");
    {
      RuntimeConfig config;
      config.model = package_for(name, root.path() / "pkg");
      config.output_dir = root.path() / "out";
      config.retry_attempts = 1;
      config.batching.max_batch = 1;  // fixed, not "auto": no start-up probe
      config.threads_per_device = 1;
      Runtime rt(config);
      const json::object spec{{"prompt", "a red square"}, {"name", "seam"}, {"width", 128}, {"height", 128},
                              {"frames", 9}, {"steps", 2}, {"seed", 7}};
      const auto result = rt.submit(spec).wait();
      REQUIRE_MESSAGE(result.state == JobState::done, result.error);
      const auto video = probe_video(result.output);
      CHECK(video.width == 128);
      CHECK(video.height == 128);
      CHECK(video.frames == 9);
      rt.drain();
    }
  }
}

// test-echo's test-only tone option (tests/families/echo/): a job's sound goes through decode,
// the batcher's audio_decode report and encode into the output, where probe finds it.
TEST_CASE("a test family's tone reaches the output as an audio stream" * doctest::timeout(300)) {
  test_family_names();
  const test::TempDir root("vgen-family-seam-tone-");
  RuntimeConfig config;
  config.model = package_for("test-echo", root.path() / "pkg",
                             {{"test_tone", json::object{{"hz", 440}, {"sample_rate", 16000}, {"channels", 1}}}});
  config.output_dir = root.path() / "out";
  config.retry_attempts = 1;
  config.batching.max_batch = 1;
  config.threads_per_device = 1;
  Runtime rt(config);
  struct Case {
    const char* format;
    const char* codec;
    int rate;
    int frame;  // samples per codec frame at `rate`: the duration's tolerance
  } cases[] = {{"mp4", "aac", 16000, 1024}, {"webm", "opus", 48000, 960}, {"gif", "pcm_s16le", 16000, 1}};
  for (const auto& c : cases) {
    const std::string format = c.format;
    CAPTURE(format);
    const json::object spec{{"prompt", "a tone"}, {"name", std::string("tone-") + c.format}, {"width", 128}, {"height", 128},
                            {"frames", 9}, {"steps", 2}, {"seed", 7}, {"fps", 16}, {"format", c.format}};
    const auto result = rt.submit(spec).wait();
    REQUIRE_MESSAGE(result.state == JobState::done, result.error);
    const auto video = probe_video(result.output);
    CHECK(video.frames == 9);
    CHECK(video.audio.codec == c.codec);
    CHECK(video.audio.sample_rate == c.rate);
    CHECK(video.audio.channels == 1);
    CHECK(std::abs(video.audio.seconds() - 9 / 16.0) <= static_cast<double>(c.frame) / c.rate);
    CHECK(result.stage_seconds.count("audio_decode") == 1);
  }
  rt.drain();
}
