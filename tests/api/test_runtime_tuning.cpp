#include "api/runtime_tuning.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <filesystem>

using namespace vgen;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

const LoadedModels& bundled() {
  static const LoadedModels models = load_models({{"shapes", fs::path(VGEN_TEST_SOURCE_DIR) / "models" / "vgen-shapes"}}, ModelSetOptions{});
  return models;
}

std::vector<DeviceSpec> cpu() { return {DeviceSpec{.id = "cpu:0"}}; }

RuntimeConfig auto_config(const fs::path& cache) {
  RuntimeConfig c;  // max_batch, threads.per_device and threads.intra_op are "auto" by default
  c.tune.dir = cache;
  c.tune.budget_s = 2;  // a bounded probe: what it has measured by then decides
  // The whole (bounded) probe at start, whatever each measurement costs: with the default first
  // wait (2 s, the budget here) a loaded machine stopped it early ("partial") now and then.
  c.tune.first_wait_s = 86400;
  c.tune.max_batch = 2;
  c.tune.spec = json::object{{"width", 128}, {"height", 128}, {"frames", 9}, {"steps", 2}};
  return c;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("numbers in the config are kept and nothing is measured") {
  test::TempDir dir;
  auto c = auto_config(dir.path());
  c.batching.max_batch = 3;
  c.threads_per_device = 2;
  MetricsRegistry metrics;
  RuntimeTuning t(c, bundled(), cpu(), metrics, 4);
  CHECK(t.choice().source == "config");
  CHECK(t.key().empty());
  CHECK(c.batching.max_batch == 3);
  CHECK(c.threads_per_device == 2);
  CHECK(c.intra_op_threads == 2);  // the cores shared out over the leases
  CHECK(fs::is_empty(dir.path()));
  CHECK(has(metrics.render_prometheus(), R"(vgen_tune_max_batch{device="cpu",model="shapes",source="config"} 3)"));
}

TEST_CASE("auto settings are measured once, then read from the cache" * doctest::timeout(300)) {
  test::TempDir dir;
  MetricsRegistry metrics;
  auto c = auto_config(dir.path());
  RuntimeTuning first(c, bundled(), cpu(), metrics, 2);
  CHECK(first.choice().source == "probe");
  CHECK(first.key().rfind("denoise|wan2.1-t2v|", 0) == 0);
  CHECK(c.batching.max_batch >= 1);
  CHECK(c.batching.max_batch <= 2);
  CHECK(c.threads_per_device * c.intra_op_threads == 2);  // the split fills the 2 cores
  CHECK(fs::is_regular_file(first.choice().file));
  CHECK(has(metrics.render_prometheus(), "vgen_tune_leases{device=\"cpu\",model=\"shapes\",source=\"probe\"} " +
                                             std::to_string(c.threads_per_device)));

  MetricsRegistry again_metrics;
  auto again = auto_config(dir.path());
  RuntimeTuning second(again, bundled(), cpu(), again_metrics, 2);
  CHECK(second.choice().source == "cache");
  CHECK(second.choice().setting == first.choice().setting);
  CHECK(again.batching.max_batch == c.batching.max_batch);
  CHECK(has(again_metrics.render_prometheus(), R"(vgen_tune_probe_seconds{device="cpu",model="shapes"} 0)"));

  SUBCASE("out of memory on the tuned shape lowers the cached batch; other keys do not") {
    second.on_capped("denoise|something else", 1);
    auto same = auto_config(dir.path());
    RuntimeTuning unchanged(same, bundled(), cpu(), again_metrics, 2);
    CHECK(unchanged.choice().setting.batch == first.choice().setting.batch);
    second.on_capped(second.key(), 1);
    auto after = auto_config(dir.path());
    RuntimeTuning capped(after, bundled(), cpu(), again_metrics, 2);
    CHECK(capped.choice().source == "cache");
    CHECK(after.batching.max_batch == 1);
  }
}

TEST_CASE("vgen render's one job: batch 1 on one lease, only the threads measured" * doctest::timeout(300)) {
  test::TempDir dir;
  MetricsRegistry metrics;
  auto c = auto_config(dir.path());
  c.tune.one_job = true;
  RuntimeTuning t(c, bundled(), cpu(), metrics, 2);
  CHECK(t.choice().source == "probe");
  CHECK(c.batching.max_batch == 1);
  CHECK(c.threads_per_device == 1);
  for (const auto& s : t.choice().samples) {
    CHECK(s.setting.batch == 1);
    CHECK(s.setting.leases == 1);
  }
}

TEST_CASE("a shape the model refuses falls back to batch 1, one lease, every core") {
  test::TempDir dir;
  MetricsRegistry metrics;
  auto c = auto_config(dir.path());
  c.tune.spec["frames"] = 4;
  RuntimeTuning t(c, bundled(), cpu(), metrics, 2);
  CHECK(t.choice().source == "fallback");
  CHECK(c.batching.max_batch == 1);
  CHECK(c.threads_per_device == 1);
  CHECK(c.intra_op_threads == 2);
}
