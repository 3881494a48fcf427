#include "api/fleet/fleet_worker.hpp"

#include "api/fleet/fleet_client.hpp"
#include "api/fleet/nats_client.hpp"
#include "tests/support/nats_server.hpp"

#include <boost/json/serialize.hpp>
#include <doctest/doctest.h>

#include <fstream>
#include <thread>

using namespace vgen;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

#define REQUIRE_BROKER()                      \
  if (!test::NatsServer::available()) {       \
    MESSAGE(test::NatsServer::skip_reason()); \
    return;                                   \
  }

// The tiny package the parity fixture writes, or empty after saying why the case is skipped.
fs::path package_or_skip() {
  const char* dir = std::getenv("VGEN_WAN_PARITY_DIR");
  if (dir && *dir && fs::is_regular_file(fs::path(dir) / "pkg" / "manifest.json")) return fs::path(dir) / "pkg";
  MESSAGE("SKIPPED: VGEN_WAN_PARITY_DIR not set (no tooling Python): no model to run");
  return {};
}

RuntimeConfig worker_config(const fs::path& pkg, const fs::path& out, const std::string& url) {
  RuntimeConfig c;
  c.model = pkg;
  c.output_dir = out;
  c.retry_attempts = 1;
  c.batching.max_batch = 1;  // fixed, not "auto": no start-up probe, the same groups on every machine
  c.threads_per_device = 1;
  c.overwrite_outputs = true;
  c.queue.url = url;
  c.queue.ack_wait = 1000ms;
  c.queue.fetch_wait = 200ms;
  return c;
}

json::object spec(const std::string& prompt, int seed = 1) {
  return {{"prompt", prompt}, {"width", 32}, {"height", 32}, {"frames", 5}, {"steps", 2}, {"seed", seed}};
}

FleetRecord record_of(NatsClient& nats, const std::string& id) {
  auto text = nats.kv_get("vgen_jobs", id);
  REQUIRE(text.has_value());
  return parse_fleet_record(*text);
}

template <class Ok>
bool eventually(Ok ok, std::chrono::seconds limit = 60s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (ok()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace

TEST_CASE("jobs from a front end run on the worker: outputs named by job, records done" * doctest::timeout(300)) {
  REQUIRE_BROKER();
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  test::NatsServer broker;
  test::TempDir out;
  Runtime runtime(worker_config(pkg, out.path(), broker.url()));
  FleetWorker worker(runtime, {.name = "w1", .capacity = 2});
  CHECK(std::find(worker.models().begin(), worker.models().end(), "default") != worker.models().end());
  worker.start();
  FleetClient fleet(runtime.config());
  std::vector<JobHandle> jobs;
  for (int i = 0; i < 3; ++i) jobs.push_back(fleet.try_submit(json::value(spec("clip", i)), {}));
  NatsClient nats({.url = broker.url()});
  for (auto& j : jobs) {
    const auto r = j.wait();
    REQUIRE(r.state == JobState::done);
    CHECK(r.output == out.path() / (j.id() + ".mp4"));
    CHECK(fs::file_size(r.output) > 0);
    CHECK(r.device.rfind("w1/", 0) == 0);  // "<worker>/<device>"
    const auto rec = record_of(nats, j.id());
    CHECK(rec.attempts == 1);
    CHECK(rec.writes == 1);
  }
  worker.stop();
  const auto s = worker.stats();
  CHECK(s.done == 3);
  CHECK(s.held == 0);
  CHECK(nats.stream_messages("VGEN_JOBS") == 0);  // every job acked
}

TEST_CASE("a job whose deliveries crashed max_crashes times is terminated and recorded failed" * doctest::timeout(300)) {
  REQUIRE_BROKER();
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  test::NatsServer broker;
  test::TempDir out;
  auto config = worker_config(pkg, out.path(), broker.url());
  Runtime runtime(config);
  FleetWorker ensure(runtime, {.name = "setup"});  // makes the stream, bucket and consumers; never started
  FleetClient fleet(config);
  auto poison = fleet.try_submit(json::value(spec("poison")), {});
  {
    // Two deliveries that "crash": taken and never acked, as a worker killed in the job leaves them.
    NatsClient thief({.url = broker.url()});
    auto pull = thief.pull_subscribe("VGEN_JOBS", "VGEN_JOBS_default", "vgen.jobs.default");
    for (int i = 1; i <= 2; ++i) {
      auto got = pull.fetch(1, 5s);
      REQUIRE(got.size() == 1);
      CHECK(got[0].deliveries() == static_cast<std::uint64_t>(i));
    }  // each dropped: redelivered after the 1 s ack wait
  }
  auto innocent = fleet.try_submit(json::value(spec("innocent")), {});
  FleetWorker worker(runtime, {.name = "w"});
  worker.start();
  const auto r = poison.wait();
  CHECK(r.state == JobState::failed);
  CHECK(r.error.find("crashed the worker 2 times") != std::string::npos);
  CHECK(innocent.wait().state == JobState::done);
  worker.stop();
  CHECK(worker.stats().quarantined == 1);
  CHECK_FALSE(fs::exists(out.path() / (poison.id() + ".mp4")));
}

TEST_CASE("a redelivered job whose record says done is acked without running again" * doctest::timeout(300)) {
  REQUIRE_BROKER();
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  test::NatsServer broker;
  test::TempDir out;
  auto config = worker_config(pkg, out.path(), broker.url());
  Runtime runtime(config);
  FleetWorker worker(runtime, {.name = "w"});
  // What a worker that died between its "done" record and its ack leaves behind.
  NatsClient nats({.url = broker.url()});
  const std::string id = "0190c0de-0000-7000-8000-0000000000d0";
  FleetRecord rec;
  rec.id = id;
  rec.status = "done";
  rec.output = (out.path() / (id + ".mp4")).string();
  rec.writes = 1;
  rec.spec = spec("done already");
  { std::ofstream(rec.output) << "video"; }
  nats.kv_put("vgen_jobs", id, json::serialize(to_json(rec)));
  nats.publish("vgen.jobs.default", json::serialize(json::object{{"id", id}, {"spec", rec.spec}}));
  worker.start();
  CHECK(eventually([&] { return worker.stats().already_done == 1; }));
  CHECK(eventually([&] { return nats.stream_messages("VGEN_JOBS") == 0; }));
  worker.stop();
  CHECK(runtime.stats().submitted == 0);
  CHECK(record_of(nats, id).writes == 1);
}

TEST_CASE("a stopping worker hands its jobs back; they are no crash for the next worker" * doctest::timeout(300)) {
  REQUIRE_BROKER();
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  test::NatsServer broker;
  test::TempDir out;
  auto config = worker_config(pkg, out.path(), broker.url());
  config.faults.stages["denoise"].latency = 3000ms;  // long enough to stop the worker inside it
  NatsClient nats({.url = broker.url()});
  std::string id;
  {
    Runtime runtime(config);
    FleetWorker worker(runtime, {.name = "leaving"});
    worker.start();
    FleetClient fleet(config);
    id = fleet.try_submit(json::value(spec("handed back")), {}).id();
    REQUIRE(eventually([&] { return record_of(nats, id).status == "running"; }));
    worker.stop(/*finish_held=*/false);
    const auto rec = record_of(nats, id);
    CHECK(rec.status == "queued");
    CHECK(rec.returned == 1);
    CHECK(worker.stats().returned == 1);
  }
  config.faults = {};
  Runtime runtime(config);
  FleetWorker next(runtime, {.name = "next"});
  next.start();
  REQUIRE(eventually([&] { return record_of(nats, id).status == "done"; }));
  next.stop();
  const auto rec = record_of(nats, id);
  CHECK(rec.worker == "next");
  CHECK(rec.attempts == 2);
  CHECK(next.stats().quarantined == 0);
}

// Regression: each model's pull thread held the worker's room during its long poll, so a
// worker serving a model with no jobs (every worker also pulls "default") left the other
// model's jobs waiting up to fetch_wait each: the fleet bench's gaps between jobs.
TEST_CASE("a long poll on a model without jobs does not hold back another model's jobs" * doctest::timeout(300)) {
  REQUIRE_BROKER();
  const auto pkg = package_or_skip();
  if (pkg.empty()) return;
  test::NatsServer broker;
  test::TempDir out;
  auto config = worker_config(pkg, out.path(), broker.url());
  config.queue.fetch_wait = 90s;  // far above 4 tiny jobs' time, even on a loaded machine
  Runtime runtime(config);
  FleetWorker worker(runtime, {.name = "w1", .capacity = 1, .models = {"default", "idle"}});
  worker.start();
  FleetClient fleet(runtime.config());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<JobHandle> jobs;
  for (int i = 0; i < 4; ++i) {
    auto s = spec("clip", i);
    s["steps"] = 1;
    jobs.push_back(fleet.try_submit(json::value(s), {}));
  }
  for (auto& j : jobs) REQUIRE(j.wait().state == JobState::done);
  const auto took = std::chrono::steady_clock::now() - t0;
  MESSAGE("4 jobs in " << std::chrono::duration<double>(took).count() << " s (fetch_wait 90 s)");
  CHECK(took < 90s);  // before: each handover to the idle model's thread cost a whole long poll
  worker.stop();
  CHECK(worker.stats().done == 4);
}
