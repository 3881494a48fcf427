#include "api/fleet/live_relay.hpp"

#include "api/fleet/nats_client.hpp"
#include "tests/support/nats_server.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_future.hpp>

#include <string>
#include <thread>
#include <vector>

using namespace vgen;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using End = LiveBroadcast::End;

namespace {

#define REQUIRE_BROKER()                          \
  if (!test::NatsServer::available()) {           \
    MESSAGE(test::NatsServer::skip_reason());     \
    return;                                       \
  }

// Every segment of `live` once it has ended (waits on its events, not on time).
LiveBroadcast::Read read_to_end(asio::thread_pool& pool, const std::shared_ptr<LiveBroadcast>& live) {
  auto all = [live]() -> asio::awaitable<LiveBroadcast::Read> {
    std::size_t n = 0;
    for (;;) {
      auto read = co_await live->next(n);
      n += read.segments.size();
      if (read.end != End::open) co_return live->read_from(0);
    }
  };
  auto done = asio::co_spawn(pool, all(), asio::use_future);
  REQUIRE(done.wait_for(60s) == std::future_status::ready);
  return done.get();
}

std::vector<std::string> texts(const LiveBroadcast::Read& read) {
  std::vector<std::string> out;
  for (const auto& s : read.segments) out.push_back(*s);
  return out;
}

}  // namespace

TEST_CASE("a relayed broadcast is replayed whole, its big segments rejoined, by a replay that starts before or after" *
          doctest::timeout(120)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient worker_side({.url = broker.url()}), front_side({.url = broker.url()});
  QueueConfig queue;
  asio::thread_pool pool(2);
  const std::vector<std::string> segments = {"init", std::string(kLivePiece * 2 + 17, 'x'), std::string(kLivePiece, 'y'), "z"};

  LiveRelay relay(worker_side, queue, "w1");
  auto early = LiveReplay::start(front_side, queue, "job1", pool.get_executor(), LiveBroadcast::default_max_bytes, nullptr);
  auto source = std::make_shared<LiveBroadcast>();
  source->append(segments[0]);
  relay.relay("job1", source);
  relay.relay("job1", source);  // once per job: no second copy of the stream
  for (std::size_t i = 1; i < segments.size(); ++i) source->append(segments[i]);
  source->finish(End::complete);

  const auto first = read_to_end(pool, early->broadcast());
  CHECK(first.end == End::complete);
  CHECK(texts(first) == segments);
  auto late = LiveReplay::start(front_side, queue, "job1", pool.get_executor(), LiveBroadcast::default_max_bytes, nullptr);
  const auto second = read_to_end(pool, late->broadcast());
  CHECK(second.end == End::complete);
  CHECK(texts(second) == segments);
}

TEST_CASE("a worker remembers a relayed job's id while it relays and for remember_for after, then forgets it" *
          doctest::timeout(120)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient nats({.url = broker.url()});
  QueueConfig queue;
  // Waits for the relays' completions (an event the relay thread records), not for a time.
  auto wait_ended = [](const LiveRelay& relay, std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (relay.ended() < n && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    REQUIRE(relay.ended() == n);
  };
  auto ended_broadcast = [] {
    auto live = std::make_shared<LiveBroadcast>();
    live->append("init");
    live->finish(End::complete);
    return live;
  };

  SUBCASE("forgotten at once after its end (remember_for 0): a long-lived worker holds no id per job") {
    LiveRelay relay(nats, queue, "w1", 0s);
    auto open = std::make_shared<LiveBroadcast>();
    relay.relay("running", open);  // relaying: remembered however old
    for (int i = 0; i < 50; ++i) relay.relay("job" + std::to_string(i), ended_broadcast());
    wait_ended(relay, 50);
    relay.relay("one-more", ended_broadcast());  // prunes the 50 that ended
    CHECK(relay.remembered() == 2);  // "running" and "one-more"
    open->finish(End::complete);
    wait_ended(relay, 52);
  }
  SUBCASE("remembered within remember_for: a second want does not relay it again") {
    LiveRelay relay(nats, queue, "w1", std::chrono::hours(1));
    relay.relay("job1", ended_broadcast());
    wait_ended(relay, 1);
    relay.relay("job1", ended_broadcast());  // once per job: nothing started
    relay.relay("job2", ended_broadcast());
    wait_ended(relay, 2);
    CHECK(relay.remembered() == 2);
    CHECK(relay.ended() == 2);
  }
}

TEST_CASE("a replay of a job that ends with nothing relayed ends failed, empty (the route serves the file)" *
          doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient front_side({.url = broker.url()});
  QueueConfig queue;
  ensure_live_stream(front_side, queue);
  asio::thread_pool pool(1);
  auto replay = LiveReplay::start(front_side, queue, "job2", pool.get_executor(), LiveBroadcast::default_max_bytes, nullptr);
  replay->job_ended();
  const auto read = read_to_end(pool, replay->broadcast());
  CHECK(read.end == End::failed);
  CHECK(read.segments.empty());
}

TEST_CASE("a replay over its byte cap ends truncated; the relay is not affected" * doctest::timeout(60)) {
  REQUIRE_BROKER();
  test::NatsServer broker;
  NatsClient worker_side({.url = broker.url()}), front_side({.url = broker.url()});
  QueueConfig queue;
  asio::thread_pool pool(2);
  LiveRelay relay(worker_side, queue, "w1");
  auto small = LiveReplay::start(front_side, queue, "job3", pool.get_executor(), 1000, nullptr);
  auto source = std::make_shared<LiveBroadcast>();
  relay.relay("job3", source);
  source->append(std::string(600, 'a'));
  source->append(std::string(600, 'b'));
  source->finish(End::complete);
  const auto read = read_to_end(pool, small->broadcast());
  CHECK(read.end == End::truncated);
  CHECK(texts(read) == std::vector<std::string>{std::string(600, 'a')});
  CHECK(source->end() == End::complete);
}
