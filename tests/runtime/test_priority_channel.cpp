#include "runtime/priority_channel.hpp"

#include "tests/support/async_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using vgen::PriorityChannel;
using vgen::QueueTicket;
using vgen::test::run_async;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

const auto t0 = clock_type::time_point{} + std::chrono::hours(1000);  // a fixed clock: ranks are deterministic

QueueTicket at(int priority, milliseconds since) { return {priority, t0 + since}; }

std::vector<std::string> drain(PriorityChannel<std::string>& ch) {
  std::vector<std::string> out;
  while (auto v = ch.try_dequeue()) out.push_back(*v);
  return out;
}

}  // namespace

TEST_CASE("higher priority first, oldest first within a level") {
  PriorityChannel<std::string> ch(8, seconds(5));
  std::string items[] = {"low-1", "high-1", "low-2", "mid", "high-2", "low-3"};
  const int prio[] = {0, 10, 0, 5, 10, 0};
  for (int i = 0; i < 6; ++i) REQUIRE(ch.try_enqueue(items[i], at(prio[i], milliseconds(i))));
  CHECK(drain(ch) == std::vector<std::string>{"high-1", "high-2", "mid", "low-1", "low-2", "low-3"});
}

TEST_CASE("equal tickets keep their order of arrival") {
  PriorityChannel<std::string> ch(8);
  for (std::string s : {"a", "b", "c", "d"}) REQUIRE(ch.try_enqueue(s, at(3, milliseconds(0))));
  CHECK(drain(ch) == std::vector<std::string>{"a", "b", "c", "d"});
}

TEST_CASE("aging: one level per `aging` of waiting, so an old item passes a newer higher one") {
  PriorityChannel<std::string> ch(8, seconds(5));
  CHECK(vgen::queue_rank(at(2, milliseconds(0)), seconds(5)) == t0 - seconds(10));
  std::string old_low = "old low", newer_high = "higher, 9 s later", newest_high = "higher, 11 s later";
  REQUIRE(ch.try_enqueue(old_low, at(0, milliseconds(0))));
  REQUIRE(ch.try_enqueue(newer_high, at(2, seconds(9))));    // 2 levels = 10 s > 9 s: ahead
  REQUIRE(ch.try_enqueue(newest_high, at(2, seconds(11))));  // 11 s > 10 s: behind the old one
  CHECK(drain(ch) == std::vector<std::string>{"higher, 9 s later", "old low", "higher, 11 s later"});
}

TEST_CASE("bounded: try_enqueue refuses when full; count_above sees waiting items and producers" * doctest::timeout(30)) {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  PriorityChannel<std::string> ch(2);
  std::string a = "a", b = "b", c = "c";
  REQUIRE(ch.try_enqueue(a, at(0, milliseconds(0))));
  REQUIRE(ch.try_enqueue(b, at(1, milliseconds(1))));
  CHECK_FALSE(ch.try_enqueue(c, at(9, milliseconds(2))));
  CHECK(c == "c");  // not moved from
  // Two producers wait for room; the higher one is served first, whatever the order they came in.
  std::vector<std::string> sent;
  auto produce = [&](std::string v, QueueTicket t) -> asio::awaitable<void> {
    co_await ch.enqueue(v, t);
    sent.push_back(v);
  };
  asio::co_spawn(io, produce("wait-low", at(0, milliseconds(3))), asio::detached);
  asio::co_spawn(io, produce("wait-high", at(7, milliseconds(4))), asio::detached);
  io.poll();
  CHECK(sent.empty());
  CHECK(ch.waiting_producers() == 2);
  CHECK(ch.size() == 2);
  CHECK(ch.count_above(0) == 2);   // b (1) and wait-high (7)
  CHECK(ch.count_above(-1) == 4);
  CHECK(ch.count_above(7) == 0);
  CHECK(ch.try_dequeue() == "wait-high");  // it ranks before every accepted item: served first
  io.poll();
  CHECK(sent == std::vector<std::string>{"wait-high"});
  CHECK(ch.size() == 2);
  CHECK(ch.try_dequeue() == "b");  // frees one place: wait-low is accepted
  io.poll();
  CHECK(sent == std::vector<std::string>{"wait-high", "wait-low"});
  CHECK(ch.try_dequeue() == "a");
  CHECK(ch.try_dequeue() == "wait-low");
  CHECK(ch.size() == 0);
}

TEST_CASE("requeue is accepted when full and when closed, and is served by its rank" * doctest::timeout(30)) {
  PriorityChannel<std::string> ch(1);
  std::string first = "first";
  REQUIRE(ch.try_enqueue(first, at(0, milliseconds(5))));
  ch.requeue("preempted", at(0, milliseconds(1)));  // full, but it held a place before: accepted, and it is older
  CHECK(ch.size() == 2);
  ch.close();
  ch.requeue("late", at(0, milliseconds(9)));
  CHECK(drain(ch) == std::vector<std::string>{"preempted", "first", "late"});
  run_async([&](asio::io_context&) -> asio::awaitable<void> {
    CHECK_FALSE((co_await ch.dequeue()).has_value());  // closed and drained: end of stream
    auto [ec] = co_await ch.enqueue("refused", at(0, milliseconds(0)), asio::as_tuple(asio::use_awaitable));
    CHECK(ec == vgen::channel_errc::closed);
  });
}

TEST_CASE("a waiting producer of higher rank is served before requeued items" * doctest::timeout(30)) {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  PriorityChannel<std::string> ch(1);
  std::string low = "low";
  REQUIRE(ch.try_enqueue(low, at(0, milliseconds(0))));
  bool accepted = false;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    co_await ch.enqueue("urgent", at(9, milliseconds(5)));
    accepted = true;
  }, asio::detached);
  io.poll();
  ch.requeue("preempted", at(0, milliseconds(1)));  // the channel is now over its capacity
  CHECK(ch.try_dequeue() == "urgent");  // not the requeued one: the waiting producer ranks first
  io.poll();
  CHECK(accepted);
  CHECK(ch.try_dequeue() == "low");
  CHECK(ch.try_dequeue() == "preempted");
  CHECK_FALSE(ch.try_dequeue().has_value());
}

TEST_CASE("a waiting consumer gets the item directly; close ends consumers and refuses producers" * doctest::timeout(30)) {
  run_async(
      [](asio::io_context& io) -> asio::awaitable<void> {
        PriorityChannel<int> ch(1);
        std::vector<int> got;
        std::atomic<bool> ended = false;  // set on another of the two threads
        asio::co_spawn(
            io,
            [&]() -> asio::awaitable<void> {
              while (auto v = co_await ch.dequeue()) got.push_back(*v);
              ended = true;
            },
            asio::detached);
        co_await vgen::test::sleep_for(milliseconds(5));
        co_await ch.enqueue(1, at(0, milliseconds(0)));
        co_await ch.enqueue(2, at(5, milliseconds(0)));
        co_await ch.enqueue(3, at(-5, milliseconds(0)));
        ch.close();
        // Until the consumer saw the end: run_async's watchdog bounds a hang, not a count of sleeps.
        while (!ended) co_await vgen::test::sleep_for(milliseconds(1));
        CHECK(got.size() == 3);
      },
      seconds(20), 2);
}

TEST_CASE("a cancelled producer's item is not accepted and no longer counts" * doctest::timeout(30)) {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  PriorityChannel<std::string> ch(1);
  std::string a = "a";
  REQUIRE(ch.try_enqueue(a, at(0, milliseconds(0))));
  asio::cancellation_signal cancel;
  boost::system::error_code result;
  ch.enqueue("blocked", at(9, milliseconds(1)),
             asio::bind_cancellation_slot(cancel.slot(), asio::bind_executor(io, [&](boost::system::error_code ec) { result = ec; })));
  io.poll();
  CHECK(ch.count_above(0) == 1);
  cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK(result == asio::error::operation_aborted);
  CHECK(ch.count_above(0) == 0);
  CHECK(ch.try_dequeue() == "a");
  CHECK_FALSE(ch.try_dequeue().has_value());
}

TEST_CASE("bad construction is refused") {
  CHECK_THROWS_AS(PriorityChannel<int>(0), std::invalid_argument);
  CHECK_THROWS_AS(PriorityChannel<int>(1, milliseconds(0)), std::invalid_argument);
}

// ---- The contract every order keeps (runtime/channel.hpp), run against both orders ----
// Items with equal tickets: the priority order then serves them by arrival, like the FIFO one.

#define VGEN_CHANNELS vgen::BoundedChannel<int>, vgen::PriorityChannel<int>

TEST_CASE_TEMPLATE("contract: accepted items survive close, then end of stream is sticky", Ch, VGEN_CHANNELS) {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  Ch ch(4);
  std::vector<std::optional<int>> got;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    co_await ch.enqueue(1, typename Ch::Ticket{});
    co_await ch.enqueue(2, typename Ch::Ticket{});
    ch.close();
    for (int i = 0; i < 4; ++i) got.push_back(co_await ch.dequeue());
  }, asio::detached);
  io.poll();
  CHECK(ch.is_closed());
  CHECK(got == std::vector<std::optional<int>>{1, 2, std::nullopt, std::nullopt});
}

TEST_CASE_TEMPLATE("contract: a closed channel refuses enqueue and try_enqueue", Ch, VGEN_CHANNELS) {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  Ch ch(2);
  ch.close();
  boost::system::error_code result;
  ch.enqueue(7, typename Ch::Ticket{}, asio::bind_executor(io, [&](boost::system::error_code ec) { result = ec; }));
  io.poll();
  CHECK(result == vgen::channel_errc::closed);
  int v = 8;
  CHECK_FALSE(ch.try_enqueue(v, typename Ch::Ticket{}));
  CHECK(ch.size() == 0);
}

TEST_CASE_TEMPLATE("contract: try_enqueue and try_dequeue never wait; a refused item is not moved from", Ch, VGEN_CHANNELS) {
  Ch ch(2);
  CHECK_THROWS_AS(Ch(0), std::invalid_argument);
  int one = 1, two = 2;
  CHECK(ch.try_enqueue(one, typename Ch::Ticket{}));
  CHECK(ch.try_enqueue(two, typename Ch::Ticket{}));
  std::string s = "kept";
  vgen::BoundedChannel<std::string> full(1);
  std::string first = "first";
  REQUIRE(full.try_enqueue(first));
  CHECK_FALSE(full.try_enqueue(s));
  CHECK(s == "kept");
  int three = 3;
  CHECK_FALSE(ch.try_enqueue(three, typename Ch::Ticket{}));
  CHECK(ch.try_dequeue() == 1);
  CHECK(ch.try_dequeue() == 2);
  CHECK_FALSE(ch.try_dequeue().has_value());
}

TEST_CASE_TEMPLATE("contract: a full channel parks its producer; every item arrives once, in order" * doctest::timeout(30), Ch,
                   VGEN_CHANNELS) {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  Ch ch(3);
  int sent = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 50; ++i) {
      co_await ch.enqueue(i, typename Ch::Ticket{});
      ++sent;
    }
  }, asio::detached);
  io.poll();
  CHECK(sent == 3);
  CHECK(ch.size() == 3);
  CHECK(ch.waiting_producers() == 1);
  std::vector<int> got;
  std::size_t max_size = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    while (got.size() < 50) {
      max_size = std::max(max_size, ch.size());
      got.push_back(*co_await ch.dequeue());
    }
  }, asio::detached);
  io.poll();
  REQUIRE(got.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(got[i] == i);
  CHECK(max_size <= 3);
  CHECK(ch.waiting_producers() == 0);
}

TEST_CASE_TEMPLATE("contract: close ends waiting consumers and refuses waiting producers" * doctest::timeout(30), Ch,
                   VGEN_CHANNELS) {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  Ch idle(1);
  int eos = 0;
  for (int i = 0; i < 2; ++i)
    idle.dequeue(asio::bind_executor(io, [&](boost::system::error_code ec, std::optional<int> v) { eos += !ec && !v; }));
  io.poll();
  CHECK(idle.waiting_consumers() == 2);
  idle.close();
  io.poll();
  CHECK(eos == 2);
  CHECK(idle.waiting_consumers() == 0);

  Ch full(1);
  int first = 1;
  REQUIRE(full.try_enqueue(first, typename Ch::Ticket{}));
  std::optional<boost::system::error_code> blocked;
  full.enqueue(2, typename Ch::Ticket{}, asio::bind_executor(io, [&](boost::system::error_code ec) { blocked = ec; }));
  io.poll();
  CHECK(full.waiting_producers() == 1);
  CHECK_FALSE(blocked.has_value());
  full.close();
  io.poll();
  REQUIRE(blocked.has_value());
  CHECK(*blocked == vgen::channel_errc::closed);
  CHECK(full.try_dequeue() == 1);  // the accepted item survives close()
  CHECK_FALSE(full.try_dequeue().has_value());
}

TEST_CASE_TEMPLATE("contract: a cancelled dequeue takes nothing and a cancelled enqueue accepts nothing", Ch, VGEN_CHANNELS) {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  Ch ch(1);
  asio::cancellation_signal recv_cancel;
  boost::system::error_code recv_ec;
  ch.dequeue(asio::bind_cancellation_slot(recv_cancel.slot(), asio::bind_executor(io,
      [&](boost::system::error_code ec, std::optional<int>) { recv_ec = ec; })));
  io.poll();
  CHECK(ch.waiting_consumers() == 1);
  recv_cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK(recv_ec == asio::error::operation_aborted);
  CHECK(ch.waiting_consumers() == 0);

  int one = 1;
  CHECK(ch.try_enqueue(one, typename Ch::Ticket{}));
  asio::cancellation_signal send_cancel;
  boost::system::error_code send_ec;
  ch.enqueue(2, typename Ch::Ticket{}, asio::bind_cancellation_slot(send_cancel.slot(), asio::bind_executor(io,
      [&](boost::system::error_code ec) { send_ec = ec; })));
  io.poll();
  CHECK(ch.waiting_producers() == 1);
  send_cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK(send_ec == asio::error::operation_aborted);
  CHECK(ch.waiting_producers() == 0);
  CHECK(ch.try_dequeue() == 1);
  CHECK_FALSE(ch.try_dequeue().has_value());  // 2 was never accepted
}

// Producers and consumers on several threads; the channel closes while producers still send.
// Every accepted item is received exactly once; every refused one was reported to its producer.
// The close comes from the consumer that received the half-way item: no timing involved.
TEST_CASE_TEMPLATE("contract: producers and consumers on threads, closed mid-traffic: nothing lost or duplicated"
                   * doctest::timeout(120), Ch, VGEN_CHANNELS) {
  constexpr int producers = 3, consumers = 3, per_producer = 2000;
  for (int threads : {1, 4}) {
    for (std::size_t capacity : {1u, 16u}) {
      CAPTURE(threads);
      CAPTURE(capacity);
      std::mutex m;
      std::vector<int> accepted, received;
      std::atomic<int> refused{0}, received_count{0};
      {
        asio::io_context io;
        Ch ch(capacity);
        for (int p = 0; p < producers; ++p) {
          asio::co_spawn(io, [&, p]() -> asio::awaitable<void> {
            std::vector<int> mine;
            for (int i = 0; i < per_producer; ++i) {
              const int v = p * per_producer + i;
              auto [ec] = co_await ch.enqueue(v, typename Ch::Ticket{}, asio::as_tuple(asio::use_awaitable));
              if (ec) { refused += per_producer - i; break; }
              mine.push_back(v);
            }
            std::lock_guard l(m);
            accepted.insert(accepted.end(), mine.begin(), mine.end());
          }, asio::detached);
        }
        for (int c = 0; c < consumers; ++c) {
          asio::co_spawn(io, [&]() -> asio::awaitable<void> {
            std::vector<int> mine;
            while (auto v = co_await ch.dequeue()) {
              mine.push_back(*v);
              if (++received_count == producers * per_producer / 2) ch.close();
            }
            std::lock_guard l(m);
            received.insert(received.end(), mine.begin(), mine.end());
          }, asio::detached);
        }
        std::vector<std::thread> pool;
        for (int t = 1; t < threads; ++t) pool.emplace_back([&] { io.run(); });
        io.run();  // returns once every producer and consumer has finished
        for (auto& t : pool) t.join();
      }
      std::sort(accepted.begin(), accepted.end());
      std::sort(received.begin(), received.end());
      CHECK(std::adjacent_find(received.begin(), received.end()) == received.end());
      CHECK(received == accepted);
      CHECK(accepted.size() + static_cast<std::size_t>(refused.load()) == producers * per_producer);
      CHECK(accepted.size() >= producers * per_producer / 2);
    }
  }
}
