#include "runtime/semaphore.hpp"

#include "tests/support/async_test.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <atomic>
#include <stdexcept>
#include <vector>

namespace asio = boost::asio;
using vgen::AsyncSemaphore;
using vgen::test::run_async;

TEST_CASE("try_acquire respects the limit and release returns permits") {
  AsyncSemaphore sem(2);
  CHECK(sem.try_acquire());
  {
    auto p = sem.try_acquire_permit();
    CHECK(p);
    CHECK(sem.available() == 0);
    CHECK_FALSE(sem.try_acquire());
  }
  CHECK(sem.available() == 1);
  sem.release();
  CHECK(sem.available() == 2);
  CHECK_THROWS_AS(sem.release(), std::logic_error);
}

static void run_limit_case(int threads, std::size_t limit) {
  std::atomic<int> active{0}, peak{0}, finished{0};
  constexpr int workers = 64;
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    AsyncSemaphore sem(limit);
    for (int i = 0; i < workers; ++i) {
      asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        {
          auto permit = co_await sem.acquire_permit();
          const int now = ++active;
          int seen = peak.load();
          while (now > seen && !peak.compare_exchange_weak(seen, now)) {}
          for (int k = 0; k < 3; ++k)  // hold the permit across suspensions
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
          --active;
        }
        // Counted only after the permit is back: counting first let the checker on another
        // thread see all workers finished with the last permit still held (flaky on 2 cores).
        ++finished;
      }, asio::detached);
    }
    while (finished < workers) co_await vgen::test::sleep_for(std::chrono::milliseconds(1));
    CHECK(sem.available() == limit);
  }, vgen::test::default_timeout, threads);
  CHECK(peak.load() <= static_cast<int>(limit));
  CHECK(peak.load() >= 1);
}

TEST_CASE("the semaphore never admits more than its limit" * doctest::timeout(60)) {
  for (int threads : {1, 2, 4})
    for (std::size_t limit : {1u, 3u, 8u}) {
      CAPTURE(threads);
      CAPTURE(limit);
      run_limit_case(threads, limit);
    }
}

TEST_CASE("waiters are served first in, first out") {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);  // poll() must not stop the context when idle
  AsyncSemaphore sem(1);
  REQUIRE(sem.try_acquire());
  std::vector<int> order;
  for (int i = 0; i < 5; ++i)
    sem.acquire(asio::bind_executor(io, [&, i](boost::system::error_code ec) {
      if (!ec) order.push_back(i);
    }));
  io.poll();
  CHECK(sem.waiting() == 5);
  CHECK_FALSE(sem.try_acquire());  // a waiter is never overtaken
  for (int i = 0; i < 5; ++i) {
    sem.release();
    io.poll();
  }
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
  sem.release();
  CHECK(sem.available() == 1);
}

TEST_CASE("a cancelled acquire holds nothing") {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);  // poll() must not stop the context when idle
  AsyncSemaphore sem(1);
  REQUIRE(sem.try_acquire());
  asio::cancellation_signal cancel;
  boost::system::error_code result;
  sem.acquire(asio::bind_cancellation_slot(cancel.slot(),
      asio::bind_executor(io, [&](boost::system::error_code ec) { result = ec; })));
  io.poll();
  CHECK(sem.waiting() == 1);
  cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK(result == asio::error::operation_aborted);
  CHECK(sem.waiting() == 0);
  sem.release();
  CHECK(sem.available() == 1);
}

TEST_CASE("cancelling a waiter in the middle of the queue keeps the others in order") {
  // Regression: erasing from the middle used to move-assign neighbouring waiters, which
  // overflows the stack in Boost 1.81's any_completion_handler.
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  AsyncSemaphore sem(1);
  REQUIRE(sem.try_acquire());
  std::vector<int> order;
  std::vector<boost::system::error_code> results(3);
  asio::cancellation_signal cancel_middle;
  for (int i = 0; i < 3; ++i) {
    auto done = asio::bind_executor(io, [&, i](boost::system::error_code ec) {
      results[i] = ec;
      if (!ec) order.push_back(i);
    });
    if (i == 1) sem.acquire(asio::bind_cancellation_slot(cancel_middle.slot(), done));
    else sem.acquire(done);
  }
  io.poll();
  cancel_middle.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK(results[1] == asio::error::operation_aborted);
  CHECK(sem.waiting() == 2);
  sem.release();
  io.poll();
  sem.release();
  io.poll();
  CHECK(order == std::vector<int>{0, 2});
  sem.release();
}
