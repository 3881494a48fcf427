#include "runtime/priority_channel.hpp"

#include "tests/support/async_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <atomic>
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
