#include "stages/exec/tune_probe.hpp"

#include "runtime/errors.hpp"
#include "stages/families/family.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <filesystem>

using namespace vgen;
namespace json = boost::json;

namespace {

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
