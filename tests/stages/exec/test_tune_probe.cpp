#include "stages/exec/tune_probe.hpp"

#include "runtime/errors.hpp"
#include "stages/families/family.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <unistd.h>

using namespace vgen;
namespace json = boost::json;

namespace {

// wan_aoti_parity's package (tools/reference/wan_aoti_parity.py): a tiny Wan whose transformer
// is also compiled for the CPU (.pt2); nullopt (skipped) without the fixture.
std::optional<std::filesystem::path> aoti_package_or_skip() {
  const char* dir = std::getenv("VGEN_WAN_AOTI_PARITY_DIR");
  if (!dir || !*dir || !std::filesystem::is_regular_file(std::filesystem::path(dir) / "parity.json")) {
    WARN_MESSAGE(false, "VGEN_WAN_AOTI_PARITY_DIR not set (no tooling Python): skipped");
    return std::nullopt;
  }
  std::ifstream in(std::filesystem::path(dir) / "parity.json");
  std::stringstream text;
  text << in.rdbuf();
  return std::filesystem::path(std::string(json::parse(text.str()).at("package").as_string()));
}

// The bundled model (models/vgen-shapes, Wan 2.1 family) at a small shape.
const LoadedModels& bundled() {
  static const LoadedModels models =
      load_models({{"shapes", std::filesystem::path(VGEN_TEST_SOURCE_DIR) / "models" / "vgen-shapes"}}, ModelSetOptions{});
  return models;
}

json::value small_spec() { return json::parse(R"({"prompt": "a red ball", "width": 128, "height": 128, "frames": 9, "steps": 3})"); }

}  // namespace

TEST_CASE("the probe's key is the shape's denoise group key and its steps the spec's") {
  TuneProbe probe(bundled(), small_spec(), "cpu");
  CHECK(probe.key().rfind("denoise|wan2.1-t2v|", 0) == 0);
  CHECK(probe.key().find("|3|") != std::string::npos);  // steps are part of the key
  CHECK(probe.steps() == 3);
  CHECK(probe.model() == "shapes");
  // Another size is another key; the same shape from another probe is the same key.
  auto bigger = small_spec();
  bigger.as_object()["width"] = 192;
  CHECK(TuneProbe(bundled(), bigger, "cpu").key() != probe.key());
  CHECK(TuneProbe(bundled(), small_spec(), "cpu").key() == probe.key());
}

TEST_CASE("the tuner's cache key is the package and the shape, computed without running a model") {
  const auto& family = *bundled().models.front().second;
  const auto before = family.text_cache_stats();
  TuneProbe probe(bundled(), small_spec(), "cpu");
  const auto key = probe.shape_key();
  CHECK(key.rfind(family.key_prefix() + "|", 0) == 0);
  const auto after = family.text_cache_stats();
  CHECK(after.hits + after.misses == before.hits + before.misses);  // no text was encoded
  // Prompt and seed do not change what a model call costs; size and steps do.
  auto other = small_spec();
  other.as_object()["prompt"] = "a blue square";
  other.as_object()["seed"] = 7;
  CHECK(TuneProbe(bundled(), other, "cpu").shape_key() == key);
  auto longer = small_spec();
  longer.as_object()["steps"] = 4;
  CHECK(TuneProbe(bundled(), longer, "cpu").shape_key() != key);
  auto taller = small_spec();
  taller.as_object()["height"] = 192;
  CHECK(TuneProbe(bundled(), taller, "cpu").shape_key() != key);
  // The group key does encode (so the check above can see an encoding).
  probe.key();
  const auto encoded = family.text_cache_stats();
  CHECK(encoded.hits + encoded.misses > after.hits + after.misses);
}

TEST_CASE("measure times denoiser and decoder calls at a batch and split" * doctest::timeout(300)) {
  TuneProbe probe(bundled(), small_spec(), "cpu");
  for (const auto setting : {TuneSetting{1, 1, 1}, TuneSetting{2, 2, 1}}) {
    const auto s = probe.measure(setting);
    CAPTURE(to_string(setting));
    CHECK_FALSE(s.out_of_memory);
    CHECK(s.setting == setting);
    CHECK(s.step_s > 0);
    CHECK(s.decode_s > 0);
    // What it cost covers the warm-up and the timed calls.
    CHECK(s.spent_s >= TuneProbe::kCalls * s.step_s + s.decode_s);
  }
  // What the runtime does once it has chosen: the groups are freed; the key and a later
  // measure still work (they prepare again).
  const auto key = probe.key();
  probe.release();
  CHECK(probe.key() == key);
  CHECK(probe.measure(TuneSetting{1, 1, 1}).step_s > 0);
}

TEST_CASE("a spec its model refuses, or an unknown model, is invalid_argument") {
  auto bad = small_spec();
  bad.as_object()["frames"] = 4;  // fewer than the package allows
  CHECK_THROWS_AS(TuneProbe(bundled(), bad, "cpu"), Error);
  auto unknown = small_spec();
  unknown.as_object()["model"] = "nope";
  try {
    TuneProbe p(bundled(), unknown, "cpu");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("nope") != std::string::npos);
  }
}

TEST_CASE("the tuner's key names each component's backend and the device type: a TorchScript choice is not reused for a compiled package") {
  const auto pkg = aoti_package_or_skip();
  if (!pkg) return;
  const auto models = load_models({{"tiny", *pkg}}, ModelSetOptions{});
  const auto& package = models.models.front().second->package();
  CHECK(backends_key(package, "cpu", "auto").find("transformer=aoti") != std::string::npos);
  CHECK(backends_key(package, "cpu", "torchscript").find("transformer=torchscript") != std::string::npos);
  CHECK(backends_key(package, "cpu:1", "auto") == backends_key(package, "cpu", "auto"));  // a CPU replica is the same hardware
  CHECK(backends_key(package, "cpu", "auto").find("tokenizer") == std::string::npos);      // no model behind it
  // The package has no .pt2 for CUDA: there its transformer is TorchScript.
  CHECK(backends_key(package, "cuda:0", "auto").find("transformer=torchscript") != std::string::npos);

  const auto spec = json::parse(R"({"prompt": "p", "width": 32, "height": 32, "frames": 5, "steps": 2})");
  const TuneProbe compiled(models, spec, "cpu", "auto"), scripted(models, spec, "cpu", "torchscript");
  CHECK(compiled.shape_key() != scripted.shape_key());
  CHECK(TuneProbe(models, spec, "cuda:0", "auto").shape_key() != compiled.shape_key());  // the device type too

  // Through the tuner: a choice cached for the TorchScript backend is not what the compiled one reads.
  const auto dir = std::filesystem::temp_directory_path() / ("vgen-tune-backend-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  AutoTuner tuner({.cache_dir = dir});
  std::atomic<int> calls{0};
  const TuneMeasure fake = [&](const TuneSetting& s) {
    ++calls;
    return TuneSample{.setting = s, .step_s = 1.0, .decode_s = 0.0, .spent_s = 0.001};
  };
  const TuneSpace space{.cores = 2, .max_batch = 2};
  CHECK(tuner.choose(scripted.shape_key(), space, fake).source == "probe");
  const int after_scripted = calls;
  CHECK(after_scripted > 0);
  CHECK(tuner.choose(scripted.shape_key(), space, fake).source == "cache");  // the same backend: cached
  CHECK(calls == after_scripted);
  CHECK(tuner.choose(compiled.shape_key(), space, fake).source == "probe");  // the other: measured anew
  CHECK(calls > after_scripted);
  std::filesystem::remove_all(dir);
}
