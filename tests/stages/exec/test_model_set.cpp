#include "stages/exec/model_set.hpp"

#include "runtime/device_pool.hpp"
#include "runtime/executor.hpp"
#include "runtime/errors.hpp"
#include "stages/model/torch_devices.hpp"
#include "stages/post/post_process.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <filesystem>
#include <map>

using namespace vgen;
namespace fs = std::filesystem;

namespace {

fs::path bundled() { return fs::path(VGEN_TEST_SOURCE_DIR) / "models" / "vgen-shapes"; }

// The workers of each stage a ModelSet over the bundled model gives a Pipeline.
std::map<std::string, std::size_t> workers(std::size_t max_batch, std::size_t leases, std::size_t configured = 1) {
  const auto devs = parse_device_list("cpu");
  Executor executor({.io_threads = 1});
  add_device_pools(executor, devs);
  DevicePool pool(devs);
  ModelSetOptions o;
  o.batching.max_batch = max_batch;
  o.leases = leases;
  for (auto& [name, s] : o.stages) s.workers = configured;
  ModelSet set({{"shapes", bundled()}}, executor, pool, o);
  std::map<std::string, std::size_t> out;
  for (const auto& s : set.stages()) out[s.name] = s.workers;
  return out;
}

}  // namespace

TEST_CASE("the model stages have a worker for every job of a group on every lease") {
  // Each job in a forming or running group holds a worker: with fewer than max_batch x leases,
  // one group's jobs hold them all and the other leases idle.
  auto w = workers(2, 2);
  CHECK(w["preprocess"] == 4);
  CHECK(w["denoise"] == 4);
  CHECK(w["decode"] == 4);
  CHECK(w["encode"] == 1);  // encode is not grouped
  w = workers(4, 1);
  CHECK(w["denoise"] == 4);
  w = workers(1, 1, 3);  // configured workers are a floor, never lowered
  CHECK(w["denoise"] == 3);
  CHECK(w["encode"] == 3);
}

namespace {

// An interpolator that only names itself: what the content key should see.
struct NamedInterpolator final : PostProcessor {
  PostKind kind() const override { return PostKind::interpolate; }
  std::string name() const override { return "test-named"; }
  std::string identity() const override { return "test-named@weights-2"; }
  VideoFrames run(const VideoFrames& in, int, const std::string&) const override { return in; }
};

}  // namespace

TEST_CASE("a job's model id names the post-stage variants it asks for, so another one never shares its result") {
  post_processors().add("test-named", [](const PostOptions&) { return std::make_shared<NamedInterpolator>(); });
  const auto devs = parse_device_list("cpu");
  Executor executor({.io_threads = 1});
  add_device_pools(executor, devs);
  DevicePool pool(devs);
  ModelSetOptions fallback, named;
  named.post.interpolator = "test-named";
  ModelSet a({{"shapes", bundled()}}, executor, pool, fallback), b({{"shapes", bundled()}}, executor, pool, named);
  JobSpec plain, interpolated, upscaled;
  interpolated.interpolate = 2;
  upscaled.upscale = 2;
  CHECK(a.model_id(plain) == b.model_id(plain));  // no post-stage: the package alone
  CHECK(a.model_id(plain).find('|') == std::string::npos);
  CHECK(a.model_id(interpolated) == a.model_id(plain) + "|interpolate:minterpolate");
  CHECK(b.model_id(interpolated) == b.model_id(plain) + "|interpolate:test-named@weights-2");
  CHECK(a.model_id(upscaled) == b.model_id(upscaled));  // the same upscaler (lanczos) on both
  CHECK(a.model_id(upscaled) == a.model_id(plain) + "|upscale:lanczos");
}

TEST_CASE("an unknown package directory is an error naming it") {
  const auto devs = parse_device_list("cpu");
  Executor executor({.io_threads = 1});
  add_device_pools(executor, devs);
  DevicePool pool(devs);
  try {
    ModelSet set({{"x", fs::path("/nonexistent/pkg")}}, executor, pool, ModelSetOptions{});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("/nonexistent/pkg") != std::string::npos);
  }
}

TEST_CASE("a package's bf16 default renders its float32 weights on CPU devices without native bf16; a job naming bf16 gets it") {
  const auto devs = parse_device_list("cpu");
  Executor executor({.io_threads = 1});
  add_device_pools(executor, devs);
  DevicePool pool(devs);
  ModelSetOptions native, emulated;
  native.cpu_bf16_native = true;
  emulated.cpu_bf16_native = false;
  ModelSet fast({{"shapes", bundled()}}, executor, pool, native), slow({{"shapes", bundled()}}, executor, pool, emulated);
  REQUIRE(fast.package("shapes").defaults.precision == "bfloat16");  // models/vgen-shapes' manifest
  const auto plain = boost::json::parse(R"({"prompt": "a red circle moving left", "model": "shapes"})");
  CHECK(fast.validate(plain).precision == "bfloat16");
  CHECK(slow.validate(plain).precision == "float32");
  CHECK(fast.model_id(slow.validate(plain)) == fast.model_id(JobSpec{}));  // the package's own weights: its own key
  CHECK(fast.model_id(fast.validate(plain)) != fast.model_id(JobSpec{}));   // the bf16 variant names itself
  const auto asked = boost::json::parse(R"({"prompt": "a red circle moving left", "model": "shapes", "precision": "bfloat16"})");
  CHECK(slow.validate(asked).precision == "bfloat16");
}
