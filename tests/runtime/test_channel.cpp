#include "runtime/channel.hpp"

#include "tests/support/async_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace asio = boost::asio;
using vgen::BoundedChannel;
using vgen::test::run_async;

TEST_CASE("items come out in FIFO order and end of stream follows close") {
  run_async([](asio::io_context&) -> asio::awaitable<void> {
    BoundedChannel<std::string> ch(4);
    co_await ch.enqueue("a");
    co_await ch.enqueue("b");
    ch.close();
    CHECK(ch.is_closed());
    CHECK(*co_await ch.dequeue() == "a");
    CHECK(*co_await ch.dequeue() == "b");
    CHECK_FALSE((co_await ch.dequeue()).has_value());
    CHECK_FALSE((co_await ch.dequeue()).has_value());  // end of stream is sticky
  });
}

TEST_CASE("enqueue on a closed channel fails with closed and does not accept the item") {
  run_async([](asio::io_context&) -> asio::awaitable<void> {
    BoundedChannel<int> ch(2);
    ch.close();
    auto [ec] = co_await ch.enqueue(7, asio::as_tuple(asio::use_awaitable));
    CHECK(ec == vgen::channel_errc::closed);
    CHECK(ch.size() == 0);
    int v = 8;
    CHECK_FALSE(ch.try_enqueue(v));
  });
}

TEST_CASE("try_enqueue and try_dequeue never wait") {
  BoundedChannel<int> ch(2);
  CHECK(ch.try_enqueue(1));
  CHECK(ch.try_enqueue(2));
  int three = 3;
  CHECK_FALSE(ch.try_enqueue(three));
  CHECK(three == 3);  // not moved from
  CHECK(ch.try_dequeue() == 1);
  CHECK(ch.try_dequeue() == 2);
  CHECK_FALSE(ch.try_dequeue().has_value());
}

TEST_CASE("a full channel blocks its producer and memory stays bounded") {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);  // poll() must not stop the context when idle
  BoundedChannel<int> ch(4);
  int sent = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 100; ++i) {
      co_await ch.enqueue(i);
      ++sent;
    }
  }, asio::detached);
  io.poll();  // runs every ready handler; the producer is now parked on the full channel
  CHECK(sent == 4);
  CHECK(ch.size() == 4);
  CHECK(ch.waiting_producers() == 1);

  std::vector<int> got;
  std::size_t max_size = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    while (got.size() < 100) {
      max_size = std::max(max_size, ch.size());
      got.push_back(*co_await ch.dequeue());
    }
  }, asio::detached);
  io.poll();  // every hand-over is a ready handler: no waiting on the clock
  REQUIRE(got.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(got[i] == i);
  CHECK(max_size <= 4);
}

TEST_CASE("close wakes waiting consumers with end of stream and fails blocked producers") {
  run_async([](asio::io_context& io) -> asio::awaitable<void> {
    BoundedChannel<int> ch(1);
    int eos = 0;
    for (int i = 0; i < 2; ++i) {
      asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        if (!(co_await ch.dequeue())) ++eos;
      }, asio::detached);
    }
    co_await vgen::test::sleep_for(std::chrono::milliseconds(5));
    CHECK(ch.waiting_consumers() == 2);
    ch.close();
    co_await vgen::test::sleep_for(std::chrono::milliseconds(5));
    CHECK(eos == 2);

    BoundedChannel<int> full(1);
    co_await full.enqueue(1);
    boost::system::error_code blocked_ec;
    bool blocked_done = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      auto [ec] = co_await full.enqueue(2, asio::as_tuple(asio::use_awaitable));
      blocked_ec = ec;
      blocked_done = true;
    }, asio::detached);
    while (full.waiting_producers() == 0) co_await vgen::test::sleep_for(std::chrono::milliseconds(1));
    full.close();
    while (!blocked_done) co_await vgen::test::sleep_for(std::chrono::milliseconds(1));
    CHECK(blocked_ec == vgen::channel_errc::closed);
    CHECK(*co_await full.dequeue() == 1);  // the accepted item survives close()
    CHECK_FALSE((co_await full.dequeue()).has_value());
  });
}

TEST_CASE("a cancelled dequeue takes nothing and a cancelled enqueue accepts nothing") {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);  // poll() must not stop the context when idle
  BoundedChannel<int> ch(1);
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

  CHECK(ch.try_enqueue(1));
  asio::cancellation_signal send_cancel;
  boost::system::error_code send_ec;
  ch.enqueue(2, asio::bind_cancellation_slot(send_cancel.slot(), asio::bind_executor(io,
      [&](boost::system::error_code ec) { send_ec = ec; })));
  io.poll();
  CHECK(ch.waiting_producers() == 1);
  send_cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK(send_ec == asio::error::operation_aborted);
  CHECK(ch.try_dequeue() == 1);
  CHECK_FALSE(ch.try_dequeue().has_value());  // 2 was never accepted
}

// 4 producers and 4 consumers on a multi-threaded io_context; the channel is closed (drain
// begins) while producers are still sending. Every accepted item must be received exactly
// once; every rejected item must have been reported to its producer.
static void run_mpmc(int threads, std::size_t capacity) {
  constexpr int producers = 4, consumers = 4, per_producer = 5000;
  std::mutex m;
  std::vector<int> accepted, received;
  std::atomic<int> rejected{0};
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    BoundedChannel<int> ch(capacity);
    std::atomic<int> live{producers + consumers};
    std::atomic<int> received_count{0};
    for (int p = 0; p < producers; ++p) {
      asio::co_spawn(io, [&, p]() -> asio::awaitable<void> {
        std::vector<int> mine;
        for (int i = 0; i < per_producer; ++i) {
          const int v = p * per_producer + i;
          auto [ec] = co_await ch.enqueue(v, asio::as_tuple(asio::use_awaitable));
          if (ec) { rejected += per_producer - i; break; }
          mine.push_back(v);
        }
        { std::lock_guard l(m); accepted.insert(accepted.end(), mine.begin(), mine.end()); }
        --live;
      }, asio::detached);
    }
    for (int c = 0; c < consumers; ++c) {
      asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        std::vector<int> mine;
        while (auto v = co_await ch.dequeue()) {
          mine.push_back(*v);
          ++received_count;
        }
        { std::lock_guard l(m); received.insert(received.end(), mine.begin(), mine.end()); }
        --live;
      }, asio::detached);
    }
    // Drain in the middle of traffic: close once about half of everything went through.
    while (received_count < producers * per_producer / 2)
      co_await vgen::test::sleep_for(std::chrono::microseconds(200));
    ch.close();
    while (live > 0) co_await vgen::test::sleep_for(std::chrono::milliseconds(1));
  }, vgen::test::default_timeout, threads);

  std::sort(accepted.begin(), accepted.end());
  std::sort(received.begin(), received.end());
  CHECK(std::adjacent_find(received.begin(), received.end()) == received.end());  // no duplicate
  CHECK(received == accepted);                                                    // nothing lost
  CHECK(accepted.size() + static_cast<std::size_t>(rejected.load()) == producers * per_producer);
  CHECK(accepted.size() >= producers * per_producer / 2);
}

TEST_CASE("4 producers, 4 consumers, drain mid-traffic: no item lost or duplicated"
          * doctest::timeout(120)) {
  for (int threads : {1, 2, 4}) {
    for (std::size_t capacity : {1u, 8u, 64u}) {
      CAPTURE(threads);
      CAPTURE(capacity);
      run_mpmc(threads, capacity);
    }
  }
}
