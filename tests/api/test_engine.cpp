// vgen::Runtime on the tiny random Wan package (written by the CTest fixture
// stages.wan_parity_reference): submit/wait, progress, the result cache (duplicates in flight
// and after the fact), validation before queueing, backpressure, cancellation, faults, warm-up,
// the journal and job ids, previews. Cases with a second (fake) family beside Wan are in
// test_engine_families.cpp.
#include "api/engine.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/errors.hpp"
#include "stages/model/cuda_graph_uses.hpp"
#include "stages/model/model_backend.hpp"
#include "tests/support/engine_fixture.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <atomic>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace vgen;

using namespace vgen::test::engine;

TEST_CASE("a submitted job renders, reports progress and ends once" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  Runtime rt(small_config(pkg, out.path));
  std::mutex m;
  std::vector<JobEvent> events;
  auto h = rt.submit(spec("a red circle moving left", "one"), {.on_progress = [&](const JobEvent& e) {
                       std::lock_guard lock(m);
                       events.push_back(e);
                     }});
  const auto r = h.wait();
  REQUIRE_MESSAGE(r.state == JobState::done, r.error);
  CHECK(r.output == out.path / "one.mp4");
  CHECK(fs::file_size(r.output) > 0);
  CHECK(r.content_type == "video/mp4");
  CHECK(r.device == "cpu:0");
  CHECK_FALSE(r.cache_hit);
  CHECK(r.spec.frames == 5);
  CHECK(h.finished());
  std::lock_guard lock(m);
  std::set<std::string> states;
  int steps = 0;
  for (const auto& e : events) {
    states.emplace(e.status());
    if (e.status() == "denoise" && e.total == 2) steps = std::max(steps, e.step);
  }
  CHECK(states.count("denoise"));
  CHECK(states.count("encode"));
  CHECK(events.back().state == JobState::done);
  CHECK(steps == 2);
  CHECK(rt.find(h.id()).has_value());
  const auto j = to_json(r);
  CHECK(j.at("status").as_string() == "done");
  CHECK(j.at("output").as_string() == r.output.string());
  // /metrics names the attention kernels the transformer's calls ran (on a CPU, PyTorch's CPU
  // flash kernel or math), one series per kernel.
  const auto metrics = rt.metrics_text();
  std::istringstream lines(metrics);
  int series = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("vgen_attention_calls{", 0) == 0 && line.find("component=\"transformer\"") != std::string::npos &&
        line.find("device=\"cpu:0\"") != std::string::npos) {
      CHECK((line.find("kernel=\"flash_cpu\"") != std::string::npos || line.find("kernel=\"math\"") != std::string::npos));
      CHECK(std::stod(line.substr(line.rfind(' ') + 1)) > 0);
      ++series;
    }
  CHECK_MESSAGE(series >= 1, metrics);
}

TEST_CASE("model_backend.cuda_graphs is applied by the Runtime; /metrics counts graph events per component and device" *
          doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  auto config = small_config(pkg, out.path);
  config.model_backend.cuda_graphs = true;
  Runtime rt(config);
  CHECK(model_backend_options().cuda_graphs);
  // No CUDA device here: the events are recorded as the decorator records them
  // (stages/model/cuda_graph_calls.cpp), for this package and for another one.
  clear_cuda_graph_uses();
  const CudaGraphSite site{.package = rt.package().dir, .component = "transformer", .device = "cuda:0",
                           .file = rt.package().dir / "transformer.pt"};
  record_cuda_graph_capture(site, "forward", "[2, 16, 3, 4, 4] Float", 12.0);
  record_cuda_graph_replay(site);
  record_cuda_graph_replay(site);
  record_cuda_graph_failure({.package = "/elsewhere", .component = "transformer", .device = "cuda:0", .file = "/elsewhere/t.pt"},
                            "forward", "[1] Float", "operation not permitted when stream is capturing");
  auto value = [&rt](const std::string& event) {
    std::istringstream lines(rt.metrics_text());
    double v = -1;
    int series = 0;
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("vgen_cuda_graph_events_total{", 0) == 0 && line.find("event=\"" + event + "\"") != std::string::npos) {
        CHECK(line.find("component=\"transformer\"") != std::string::npos);
        CHECK(line.find("device=\"cuda:0\"") != std::string::npos);
        v = std::stod(line.substr(line.rfind(' ') + 1));
        ++series;
      }
    CHECK(series <= 1);
    return v;
  };
  CHECK(value("capture") == 1);
  CHECK(value("replay") == 2);
  CHECK(value("capture_failure") == -1);  // another package's: not this Runtime's model
  record_cuda_graph_replay(site);
  CHECK(value("replay") == 3);  // raised by what happened since the last scrape
  CHECK(value("replay") == 3);
  clear_cuda_graph_uses();
  set_model_backend_options({});
}

TEST_CASE("identical jobs are served from the result cache, in flight and afterwards" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  Runtime rt(small_config(pkg, out.path));
  // Three at once: one renders, the two identical ones wait for it and copy its output.
  auto a = rt.submit(spec("a blue square moving up", "a"));
  auto b = rt.submit(spec("a blue square moving up", "b"));
  auto other = rt.submit(spec("a blue square moving up", "other", /*seed=*/2));
  auto c = rt.submit(spec("a blue square moving up", "c"));
  const auto ra = a.wait(), rb = b.wait(), rc = c.wait(), ro = other.wait();
  for (const auto* r : {&ra, &rb, &rc, &ro}) REQUIRE_MESSAGE(r->state == JobState::done, r->error);
  CHECK_FALSE(ra.cache_hit);
  CHECK(rb.cache_hit);
  CHECK(rc.cache_hit);
  CHECK_FALSE(ro.cache_hit);  // another seed is another video
  CHECK(bytes_of(rb.output) == bytes_of(ra.output));
  CHECK(bytes_of(rc.output) == bytes_of(ra.output));
  CHECK(bytes_of(ro.output) != bytes_of(ra.output));
  CHECK(rb.output == out.path / "b.mp4");
  // Later: straight from the cache. A changed file is not trusted.
  auto d = rt.submit(spec("a blue square moving up", "d")).wait();
  CHECK(d.cache_hit);
  CHECK(rt.stats().result_cache_hits == 3);
  { std::ofstream(ra.output, std::ios::app) << "x"; }
  std::ofstream(out.path / "b.mp4", std::ios::app) << "x";
  std::ofstream(out.path / "c.mp4", std::ios::app) << "x";
  std::ofstream(out.path / "d.mp4", std::ios::app) << "x";
  auto e = rt.submit(spec("a blue square moving up", "e")).wait();
  CHECK_FALSE(e.cache_hit);
  CHECK(rt.stats().result_cache_hits == 3);
  CHECK(rt.metrics_text().find("vgen_cache_hits_total{cache=\"results\"}") != std::string::npos);
}

TEST_CASE("a bad spec is refused before it is queued; an unknown id is not found" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  Runtime rt(small_config(pkg, out.path));
  auto bad = spec("a red circle moving left", "x");
  bad["width"] = 250;
  try {
    rt.submit(bad);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("width") != std::string::npos);
  }
  auto escape = spec("a red circle moving left", "../x");
  CHECK_THROWS_AS(rt.submit(escape), Error);
  CHECK(rt.stats().submitted == 0);
  CHECK_FALSE(rt.find("job-404").has_value());
  CHECK_FALSE(rt.cancel("job-404"));
  CHECK(fs::is_empty(out.path));
}

TEST_CASE("a full queue refuses try_submit; cancelled and queued jobs still end" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  auto cfg = small_config(pkg, out.path);
  cfg.stages["preprocess"].queue = 1;
  cfg.stages["denoise"].queue = 1;
  cfg.stages["decode"].queue = 1;
  cfg.stages["encode"].queue = 1;
  Runtime rt(cfg);
  std::vector<JobHandle> accepted;
  int refused = 0;
  for (int i = 0; i < 40 && refused == 0; ++i) {
    auto s = spec("a green triangle moving down", "j" + std::to_string(i), i);
    s["steps"] = 20;
    try {
      accepted.push_back(rt.try_submit(s));
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::overloaded);
      ++refused;
    }
  }
  CHECK(refused == 1);  // queues of one fill up long before 40 jobs of 20 steps are through
  REQUIRE(!accepted.empty());
  CHECK(rt.stats().rejected == 1);
  // Cancel the last accepted one; every accepted job ends exactly once.
  CHECK(accepted.back().cancel());
  int done = 0, cancelled = 0;
  for (auto& h : accepted) {
    const auto r = h.wait();
    if (r.state == JobState::done) ++done;
    if (r.state == JobState::cancelled) ++cancelled;
  }
  CHECK(done + cancelled == static_cast<int>(accepted.size()));
  CHECK(cancelled >= 1);
  CHECK_FALSE(fs::exists(out.path / ("j" + std::to_string(accepted.size() - 1) + ".mp4")));
}

TEST_CASE("a missing model is named") {
  TempDir out;
  try {
    Runtime rt(small_config(out.path / "nope", out.path));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("nope") != std::string::npos);
  }
}

TEST_CASE("30% injected transient faults per stage: every one of 50 jobs completes" * doctest::timeout(600)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  auto cfg = small_config(pkg, out.path);
  cfg.retry_attempts = 12;  // 0.3^12: a job failing some stage 12 times in a row is ~5e-7
  cfg.retry_initial_backoff = std::chrono::milliseconds(1);
  cfg.retry_max_backoff = std::chrono::milliseconds(5);
  cfg.faults = parse_fault_plan(json::parse(R"({"seed": 7, "stages": {"*": {"transient_rate": 0.3}}})").as_object(), "faults");
  Runtime rt(cfg);
  std::vector<JobHandle> jobs;
  for (int i = 0; i < 50; ++i) jobs.push_back(rt.submit(spec("a red circle moving left", "j" + std::to_string(i), i)));
  int retries = 0;
  for (auto& h : jobs) {
    const auto r = h.wait();
    REQUIRE_MESSAGE(r.state == JobState::done, r.id << ": " << r.error);
    retries += r.retries;
  }
  CHECK(retries > 20);  // ~0.43 retries per job and stage: the faults really happened
}

TEST_CASE("a permanent fault fails only its job; out of memory retries with a smaller batch" * doctest::timeout(600)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  auto cfg = small_config(pkg, out.path);
  cfg.retry_attempts = 3;
  cfg.retry_initial_backoff = std::chrono::milliseconds(1);
  cfg.batching.max_batch = 4;
  cfg.batching.wait = std::chrono::seconds(10);
  cfg.faults = parse_fault_plan(
      json::parse(R"({"seed": 3, "oom_above_batch": 2, "stages": {"encode": {"permanent_rate": 0.3}}})").as_object(), "faults");
  const FaultInjector oracle(cfg.faults);
  Runtime rt(cfg);
  std::vector<JobHandle> jobs;
  // Ids chosen here, not generated: the injector's draws hash the id, so random ids made "some
  // but not all jobs fail" true only ~94 % of the time (0.7^8 that none is doomed).
  for (int i = 0; i < 8; ++i) {
    SubmitOptions o;
    o.id = "permanent-fault-k" + std::to_string(i);
    jobs.push_back(rt.submit(spec("a blue square moving up", "k" + std::to_string(i), i), o));
  }
  int failed = 0, oom_retried = 0;
  for (auto& h : jobs) {
    const auto r = h.wait();
    const bool doomed = oracle.draw(r.id, "encode", r.retries) < 0.3;
    if (doomed) {
      ++failed;
      CHECK(r.state == JobState::failed);
      CHECK(r.error.find("injected permanent fault in encode") != std::string::npos);
      CHECK_FALSE(fs::exists(out.path / (r.spec.name + ".mp4")));
    } else {
      CHECK_MESSAGE(r.state == JobState::done, r.id << ": " << r.error);
    }
    oom_retried += r.retries > 0;
  }
  CHECK(failed > 0);
  CHECK(failed < 8);
  CHECK(oom_retried >= 4);  // the first batch of four ran out of memory and was retried in twos
}

TEST_CASE("warmup loads and calls every module before the first job, which renders the same bytes" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  auto& modules = ModuleCache::instance();
  std::string cold;
  {
    TempDir out;
    modules.clear();
    const auto before = modules.loads();
    Runtime rt(small_config(pkg, out.path));
    CHECK(modules.loads() == before);  // without warmup the modules load with the first job
    const auto r = rt.submit(spec("a red circle moving left", "clip")).wait();
    REQUIRE_MESSAGE(r.state == JobState::done, r.error);
    CHECK(modules.loads() == before + 3);
    cold = bytes_of(r.output);
  }
  TempDir out;
  modules.clear();
  const auto before = modules.loads();
  auto c = small_config(pkg, out.path);
  c.warmup = true;
  Runtime rt(c);
  CHECK(modules.loads() == before + 3);  // text encoder, transformer, VAE decoder
  CHECK(rt.metrics_text().find("vgen_warmup_seconds{device=\"cpu:0\"}") != std::string::npos);
  const auto r = rt.submit(spec("a red circle moving left", "clip")).wait();
  REQUIRE_MESSAGE(r.state == JobState::done, r.error);
  CHECK(modules.loads() == before + 3);  // the job ran on the warmed modules
  CHECK(bytes_of(r.output) == cold);     // warm-up changes no job state
}

TEST_CASE("a journal that cannot be opened fails the constructor cleanly, every time" * doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  std::ofstream(out.path / "garbage.db") << std::string(8192, 'g');
  fs::create_directories(out.path / "dir.db");
  // The store used to open after the pipeline's workers had started, which then ran on a
  // freed pipeline: SIGSEGV in 30-80 % of runs. Several runs, so a race would show.
  for (int i = 0; i < 6; ++i) {
    auto c = small_config(pkg, out.path / "o");
    c.journal = out.path / (i % 2 ? "garbage.db" : "dir.db");
    try {
      Runtime rt(c);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find(c.journal.string()) != std::string::npos);
    }
  }
}

TEST_CASE("ids are UUIDv7, unique across Runtimes on one journal; a finished job's error kind survives a restart" *
          doctest::timeout(300)) {
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  TempDir out;
  auto c = small_config(pkg, out.path);
  c.journal = out.path / "j.db";
  std::string first, failed;
  {
    Runtime rt(c);
    first = rt.submit(spec("a red circle", "one")).id();
    CHECK(first.size() == 36);
    CHECK(first[14] == '7');
    // A job that fails with a kind other than internal: a deadline that has passed.
    SubmitOptions o;
    o.deadline = std::chrono::milliseconds(0);
    auto h = rt.submit(spec("a blue square", "late", 7), o);
    failed = h.id();
    const auto r = h.wait();
    REQUIRE(r.error_kind);
    CHECK(*r.error_kind == ErrorKind::deadline_exceeded);
    rt.drain();
  }
  Runtime rt(c);
  const auto second = rt.submit(spec("a red circle", "two")).id();
  CHECK(second != first);
  CHECK(second > first);  // time-ordered
  const auto again = rt.find(failed);
  REQUIRE(again);
  const auto r = again->result();
  REQUIRE(r.error_kind);
  CHECK(*r.error_kind == ErrorKind::deadline_exceeded);  // came back as cancelled before
  // A client's id that a finished job already holds is refused.
  SubmitOptions o;
  o.id = first;
  CHECK_THROWS_AS(rt.submit(spec("x", "x"), o), Error);
  try {
    rt.submit(spec("x", "x"), o);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::already_exists);
  }
  rt.drain();
}

TEST_CASE("previews reach the progress callback and JobHandle::preview when preview_every is set; list_jobs is newest first" *
          doctest::timeout(300)) {
  const auto bundled = fs::path(VGEN_TEST_SOURCE_DIR) / "models" / "vgen-shapes";
  if (!fs::exists(bundled / "manifest.json")) return;
  const json::object quick{{"prompt", "a red circle moving left"}, {"width", 128}, {"height", 128}, {"frames", 8}, {"steps", 4}};
  TempDir out;
  auto config = small_config(bundled, out.path);
  config.preview_every = 2;
  Runtime rt(config);
  CHECK(rt.previews());
  std::mutex m;
  std::vector<std::shared_ptr<const JobPreview>> previews;
  auto h = rt.submit(quick, {.on_progress = [&](const JobEvent& e) {
                       std::lock_guard lock(m);
                       if (auto p = preview_of(e)) previews.push_back(p);
                     }});
  REQUIRE(h.wait().state == JobState::done);
  {
    std::lock_guard lock(m);
    REQUIRE(previews.size() == 2);
    CHECK(previews[0]->step == 2);
    CHECK(previews[1]->step == 4);
    CHECK(previews[1]->total == 4);
    CHECK(previews[1]->content_type == "image/png");
    CHECK(previews[1]->bytes.substr(1, 3) == "PNG");
    CHECK(h.preview() == previews[1]);  // the latest stays with the job
  }
  auto other = quick;
  other["seed"] = 9;
  auto second = rt.submit(other);
  second.wait();
  const auto page = rt.list_jobs({});
  REQUIRE(page.jobs.size() == 2);
  CHECK(page.jobs[0].id == second.id());
  CHECK(page.jobs[1].id == h.id());
  CHECK(rt.list_jobs({.status = "done", .limit = 1}).next != 0);

  TempDir off_dir;
  Runtime off(small_config(bundled, off_dir.path));  // unset: the library makes none
  CHECK_FALSE(off.previews());
  std::atomic<bool> any{false};
  auto quiet = off.submit(quick, {.on_progress = [&](const JobEvent& e) {
                            if (preview_of(e)) any = true;
                          }});
  REQUIRE(quiet.wait().state == JobState::done);
  CHECK_FALSE(any);
  CHECK_FALSE(quiet.preview());
}
