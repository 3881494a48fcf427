#include "api/fleet/nats_client.hpp"

#include "runtime/errors.hpp"
#include "tests/support/nats_server.hpp"

#include <doctest/doctest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

using namespace vgen;
using namespace std::chrono_literals;

namespace {

#define REQUIRE_BROKER()                          \
  if (!test::NatsServer::available()) {           \
    MESSAGE(test::NatsServer::skip_reason());     \
    return;                                       \
  }

StreamSpec jobs_stream(std::int64_t max_msgs = -1) { return {.name = "JOBS", .subjects = {"jobs.>"}, .max_msgs = max_msgs}; }

ConsumerSpec jobs_consumer(std::chrono::milliseconds ack_wait = 10s) {
  return {.stream = "JOBS", .durable = "w", .filter = "jobs.m", .ack_wait = ack_wait};
}

}  // namespace

TEST_CASE("a URL that is not one is refused as invalid input" * doctest::timeout(30)) {
  try {
    NatsClient bad({.url = "http//:nope", .timeout = 500ms});
    FAIL("connected");
  } catch (const Error& e) {
    CHECK((e.kind() == ErrorKind::invalid_argument || e.kind() == ErrorKind::transient));
  }
}

TEST_CASE("no server: connecting fails as transient, naming the URL" * doctest::timeout(30)) {
  REQUIRE_BROKER();
  int port = 0;
  {
    test::NatsServer s;
    port = s.port();
  }  // stopped: nothing listens on the port now
  const auto url = "nats://127.0.0.1:" + std::to_string(port);
  try {
    NatsClient c({.url = url, .timeout = 500ms});
    FAIL("connected");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::transient);
    CHECK(std::string(e.what()).find(url) != std::string::npos);
  }
}

TEST_CASE("a published message is fetched once, and acked it is gone" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient c({.url = broker.url()});
  c.ensure_stream(jobs_stream());
  c.ensure_stream(jobs_stream());  // idempotent
  c.ensure_consumer(jobs_consumer());
  c.ensure_consumer(jobs_consumer());
  CHECK(c.publish("jobs.m", "one") == 1);
  CHECK(c.publish("jobs.m", "two") == 2);
  auto pull = c.pull_subscribe("JOBS", "w", "jobs.m");
  auto got = pull.fetch(5, 2s);
  REQUIRE(got.size() == 2);
  CHECK(got[0].data() == "one");
  CHECK(got[1].data() == "two");
  CHECK(got[0].deliveries() == 1);
  CHECK(got[0].subject() == "jobs.m");
  got[0].ack_sync();
  got[1].ack_sync();
  CHECK(c.stream_messages("JOBS") == 0);  // work queue: acked means removed
  CHECK(pull.fetch(1, 200ms).empty());
}

TEST_CASE("fetch_now takes what is waiting and answers at once when nothing is" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient c({.url = broker.url()});
  c.ensure_stream(jobs_stream());
  c.ensure_consumer(jobs_consumer());
  auto pull = c.pull_subscribe("JOBS", "w", "jobs.m");
  for (int round = 0; round < 3; ++round) {  // about 100 ms each (with room for a loaded machine)
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(pull.fetch_now(2).empty());
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  }
  c.publish("jobs.m", "one");
  c.publish("jobs.m", "two");
  c.publish("jobs.m", "three");
  auto got = pull.fetch_now(2);
  REQUIRE(got.size() == 2);
  CHECK(got[0].data() == "one");
  for (auto& m : got) m.ack_sync();
  got = pull.fetch_now(2);
  REQUIRE(got.size() == 1);
  CHECK(got[0].data() == "three");
  got[0].ack_sync();
  CHECK(pull.fetch_now(1).empty());
}

TEST_CASE("an unacked message comes back after the ack wait with a delivery count of 2" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient c({.url = broker.url()});
  c.ensure_stream(jobs_stream());
  c.ensure_consumer(jobs_consumer(1s));
  c.publish("jobs.m", "job");
  auto pull = c.pull_subscribe("JOBS", "w", "jobs.m");
  {
    auto first = pull.fetch(1, 2s);
    REQUIRE(first.size() == 1);
    CHECK(first[0].deliveries() == 1);
  }  // dropped unacked: what a worker killed mid-job leaves
  auto again = pull.fetch(1, 5s);
  REQUIRE(again.size() == 1);
  CHECK(again[0].data() == "job");
  CHECK(again[0].deliveries() == 2);
  again[0].term();  // never again
  c.flush();
  CHECK(pull.fetch(1, 1500ms).empty());
}

TEST_CASE("in-progress acks hold a message past its ack wait" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient c({.url = broker.url()});
  c.ensure_stream(jobs_stream());
  c.ensure_consumer(jobs_consumer(1s));
  c.publish("jobs.m", "long job");
  auto pull = c.pull_subscribe("JOBS", "w", "jobs.m");
  auto held = pull.fetch(1, 2s);
  REQUIRE(held.size() == 1);
  NatsClient other({.url = broker.url()});
  auto rival = other.pull_subscribe("JOBS", "w", "jobs.m");
  // 2.5 ack waits: each fetch waits 500 ms for a redelivery that must not come.
  for (int i = 0; i < 5; ++i) {
    held[0].in_progress();
    c.flush();
    CHECK(rival.fetch(1, 500ms).empty());
  }
  held[0].ack_sync();
}

TEST_CASE("a stream at its limit refuses a publish as overloaded" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient c({.url = broker.url()});
  c.ensure_stream(jobs_stream(2));
  c.publish("jobs.m", "1");
  c.publish("jobs.m", "2");
  try {
    c.publish("jobs.m", "3");
    FAIL("accepted a third");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::overloaded);
  }
}

TEST_CASE("key-value: put, get, and a watch sees existing entries and then updates" * doctest::timeout(150)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient c({.url = broker.url()});
  c.ensure_bucket("jobs");
  CHECK_FALSE(c.kv_get("jobs", "a").has_value());
  c.kv_put("jobs", "a", "1");
  c.kv_put("jobs", "a", "2");
  CHECK(c.kv_get("jobs", "a") == "2");

  std::mutex m;
  std::condition_variable cv;
  std::map<std::string, std::string> seen;
  auto watch = c.watch_bucket("jobs", [&](std::string key, std::string value) {
    std::lock_guard lock(m);
    seen[key] = value;
    cv.notify_all();
  });
  {
    std::unique_lock lock(m);
    CHECK(cv.wait_for(lock, 50s, [&] { return seen.count("a"); }));  // bounds a hang only
    CHECK(seen["a"] == "2");
  }
  c.kv_put_nowait("jobs", "b", "x");
  std::unique_lock lock(m);
  CHECK(cv.wait_for(lock, 50s, [&] { return seen.count("b"); }));
  CHECK(seen["b"] == "x");
}

TEST_CASE("a broker restart on the same store loses nothing; the client reconnects" * doctest::timeout(150)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient c({.url = broker.url()});
  c.ensure_stream(jobs_stream());
  c.ensure_consumer(jobs_consumer());
  c.ensure_bucket("jobs");
  c.publish("jobs.m", "kept");
  c.kv_put("jobs", "k", "v");
  broker.stop();
  broker.start();
  std::vector<NatsMessage> got;
  auto pull = c.pull_subscribe("JOBS", "w", "jobs.m");
  const auto until = std::chrono::steady_clock::now() + 120s;  // a restart on a loaded machine; bounds a hang only
  while (got.empty() && std::chrono::steady_clock::now() < until) {
    try {
      got = pull.fetch(1, 1s);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::transient);  // still reconnecting
      std::this_thread::sleep_for(100ms);
    }
  }
  REQUIRE(got.size() == 1);
  CHECK(got[0].data() == "kept");
  CHECK(c.kv_get("jobs", "k") == "v");
}
