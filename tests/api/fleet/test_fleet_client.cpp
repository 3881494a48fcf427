#include "api/fleet/fleet_client.hpp"

#include "api/fleet/fleet_queue.hpp"
#include "api/fleet/nats_client.hpp"
#include "tests/support/nats_server.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

using namespace vgen;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

#define REQUIRE_BROKER()                      \
  if (!test::NatsServer::available()) {       \
    MESSAGE(test::NatsServer::skip_reason()); \
    return;                                   \
  }

RuntimeConfig fleet_config(const std::string& url) {
  RuntimeConfig c;
  c.queue.url = url;
  return c;
}

json::object spec(const std::string& prompt) { return {{"prompt", prompt}, {"steps", 2}}; }

FleetRecord record_of(NatsClient& nats, const std::string& id) {
  auto text = nats.kv_get(QueueConfig{}.bucket, id);
  REQUIRE(text.has_value());
  return parse_fleet_record(*text);
}

// Waits (polling every 10 ms, at most 120 s: a bound on a hang, not on speed) for the client's
// view of a job to satisfy `ok`. The views polled only move forward, so polling cannot miss one.
template <class Ok>
bool eventually(Ok ok) {
  const auto until = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < until) {
    if (ok()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

}  // namespace

TEST_CASE("no queue URL: refused as invalid input, naming the setting") {
  try {
    FleetClient c(RuntimeConfig{});
    FAIL("made a client");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("--queue") != std::string::npos);
  }
}

TEST_CASE("a submitted job is a queued record named by its id, and a message on its model's subject" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  FleetClient fleet(fleet_config(broker.url()));
  auto job = fleet.try_submit(json::value(spec("a red circle")), {});
  NatsClient nats({.url = broker.url()});
  const auto rec = record_of(nats, job.id());
  CHECK(rec.status == "queued");
  CHECK(rec.spec.at("name").as_string() == job.id());  // the output is named by job
  CHECK(nats.stream_messages("VGEN_JOBS") == 1);
  CHECK(fleet.find(job.id()).has_value());
  CHECK_FALSE(job.finished());
  CHECK(fleet.stats().submitted == 1);
}

TEST_CASE("bad specs are refused before anything is queued, naming the field" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  FleetClient fleet(fleet_config(broker.url()));
  const auto refusal = [&](json::value s) {
    try {
      fleet.try_submit(std::move(s), {});
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(refusal(json::array{1}).find("spec: must be a JSON object") == 0);
  CHECK(refusal(json::object{{"steps", 2}}).find("prompt: required") == 0);
  CHECK(refusal(json::object{{"prompt", "p"}, {"name", "../x"}}).find("name: '../x' must be a plain name") == 0);
  CHECK(refusal(json::object{{"prompt", "p"}, {"model", 3}}).find("model: must be a non-empty string") == 0);
  NatsClient nats({.url = broker.url()});
  CHECK(nats.stream_messages("VGEN_JOBS") == 0);
}

TEST_CASE("a full queue refuses with overloaded and leaves no record of the refused job; the others stay" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  auto config = fleet_config(broker.url());
  config.queue.max_pending = 2;
  FleetClient fleet(config);
  auto a = fleet.try_submit(json::value(spec("a")), {});
  auto b = fleet.try_submit(json::value(spec("b")), {});
  SubmitOptions third;
  third.id = "0190c0de-0000-7000-8000-000000000003";
  try {
    fleet.try_submit(json::value(spec("c")), third);
    FAIL("accepted a third");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::overloaded);
  }
  CHECK_FALSE(fleet.find(third.id).has_value());
  NatsClient nats({.url = broker.url()});
  CHECK_FALSE(nats.kv_get("vgen_jobs", third.id).has_value());  // no record of what was refused
  CHECK(fleet.find(a.id()).has_value());
  CHECK(fleet.stats().rejected == 1);
}

TEST_CASE("submit on a full queue waits, and goes in once a worker ends a job" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  auto config = fleet_config(broker.url());
  config.queue.max_pending = 1;
  FleetClient fleet(config);
  auto first = fleet.try_submit(json::value(spec("first")), {});
  std::atomic<bool> submitted{false};
  std::string second_id;
  std::thread submitter([&] {
    second_id = fleet.submit(json::value(spec("second")), {}).id();
    submitted = true;
  });
  // The submit was refused once (the stream is full) and is now waiting: it cannot get in yet.
  CHECK(eventually([&] { return fleet.stats().rejected >= 1; }));
  CHECK_FALSE(submitted.load());
  // A worker's part, by hand, in a worker's order: take the job, record its end, then acknowledge.
  NatsClient worker({.url = broker.url()});
  worker.ensure_consumer({.stream = config.queue.stream, .durable = consumer_name(config.queue, ""),
                          .filter = job_subject(config.queue, "")});
  auto pull = worker.pull_subscribe(config.queue.stream, consumer_name(config.queue, ""), job_subject(config.queue, ""));
  auto got = pull.fetch(1, 5s);
  REQUIRE(got.size() == 1);
  auto rec = record_of(worker, first.id());
  rec.status = "done";
  rec.worker = "w";
  rec.output = "/shared/" + first.id() + ".mp4";
  worker.kv_put("vgen_jobs", first.id(), json::serialize(to_json(rec)));
  got[0].ack_sync();
  submitter.join();  // returns once the freed place is seen (doctest's timeout bounds it)
  CHECK(submitted.load());
  CHECK(record_of(worker, second_id).status == "queued");
  CHECK(first.wait().state == JobState::done);
  CHECK(fleet.stats().submitted == 2);
}

TEST_CASE("the handle follows the record: progress events, then the result" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  FleetClient fleet(fleet_config(broker.url()));
  std::mutex m;
  std::vector<JobEvent> events;
  SubmitOptions o;
  o.on_progress = [&](const JobEvent& e) {
    std::lock_guard lock(m);
    events.push_back(e);
  };
  auto job = fleet.try_submit(json::value(spec("p")), o);
  // A worker's writes, by hand: running in denoise step 1 of 2, then done.
  NatsClient nats({.url = broker.url()});
  auto rec = record_of(nats, job.id());
  rec.status = "running";
  rec.worker = "w";
  rec.stage = "denoise";
  rec.step = 1;
  rec.total = 2;
  rec.attempts = 1;
  nats.kv_put("vgen_jobs", job.id(), json::serialize(to_json(rec)));
  CHECK(eventually([&] { return job.snapshot().step == 1; }));
  CHECK(job.snapshot().status() == "denoise");
  rec.status = "done";
  rec.output = "/shared/" + job.id() + ".mp4";
  rec.content_type = "video/mp4";
  rec.device = "cpu";
  nats.kv_put("vgen_jobs", job.id(), json::serialize(to_json(rec)));
  const auto r = job.wait();
  CHECK(r.state == JobState::done);
  CHECK(r.output == "/shared/" + job.id() + ".mp4");
  CHECK(r.device == "w/cpu");
  std::lock_guard lock(m);
  REQUIRE(events.size() >= 3);
  CHECK(events.back().state == JobState::done);
}

TEST_CASE("a restarted front end finds every job from the bucket; cancel of a queued job is recorded" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  std::string id;
  {
    FleetClient first(fleet_config(broker.url()));
    id = first.try_submit(json::value(spec("kept")), {}).id();
  }
  FleetClient second(fleet_config(broker.url()));
  CHECK(eventually([&] { return second.find(id).has_value() && second.caught_up(); }));
  CHECK(second.cancel(id));
  NatsClient nats({.url = broker.url()});
  CHECK(eventually([&] { return record_of(nats, id).cancel_requested; }));
}
