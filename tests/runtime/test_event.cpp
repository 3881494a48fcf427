#include "runtime/event.hpp"

#include "tests/support/async_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <atomic>
#include <memory>

namespace asio = boost::asio;
using vgen::AsyncEvent;

TEST_CASE("set wakes every waiter; wait after set completes at once" * doctest::timeout(30)) {
  for (int threads : {1, 3}) {
    std::atomic<int> woken{0};
    vgen::test::run_async([&](asio::io_context& io) -> asio::awaitable<void> {
      AsyncEvent ev;
      for (int i = 0; i < 10; ++i)
        asio::co_spawn(io, [&]() -> asio::awaitable<void> { co_await ev.wait(); ++woken; },
                       asio::detached);
      co_await vgen::test::sleep_for(std::chrono::milliseconds(2));
      CHECK(woken == 0);
      CHECK_FALSE(ev.is_set());
      ev.set();
      ev.set();  // idempotent
      co_await ev.wait();
      while (woken < 10) co_await vgen::test::sleep_for(std::chrono::milliseconds(1));
      CHECK(ev.is_set());
    }, vgen::test::default_timeout, threads);
    CHECK(woken == 10);
  }
}

TEST_CASE("a waiting wait is cancellable") {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);  // poll() must not stop the context when idle
  AsyncEvent ev;
  asio::cancellation_signal cancel;
  boost::system::error_code result;
  ev.wait(asio::bind_cancellation_slot(cancel.slot(),
      asio::bind_executor(io, [&](boost::system::error_code ec) { result = ec; })));
  io.poll();
  cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK(result == asio::error::operation_aborted);
}

// Batcher::collect's pattern: a wait raced against a timer with `||` on an io_context with
// several threads, the event set from another io thread as the timer fires. Whichever wins,
// the other branch is cancelled. Asio's cancellation slots are not thread-safe: the `||` must
// run on a strand (as the pipeline's stage workers do). The same loop on the bare io_context
// makes ThreadSanitizer report a race between the loser's completion clearing its slot and
// the winner's emission into it (cancellation_slot::clear vs cancellation_signal::emit).
TEST_CASE("a wait raced with a timer by || on a strand of several io threads ends either way" * doctest::timeout(120)) {
  using namespace asio::experimental::awaitable_operators;
  std::atomic<int> by_event{0}, by_timer{0};
  vgen::test::run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    auto race = [&]() -> asio::awaitable<void> {
      const auto token = asio::as_tuple(asio::use_awaitable);
      for (int i = 0; i < 2000; ++i) {
        auto ev = std::make_shared<AsyncEvent>();
        asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::microseconds(i % 20));
        asio::post(io, [ev] { ev->set(); });  // on any io thread, not the strand
        auto won = co_await (ev->wait(token) || timer.async_wait(token));
        ++(won.index() == 0 ? by_event : by_timer);
      }
    };
    co_await asio::co_spawn(asio::make_strand(io), race(), asio::use_awaitable);
  }, std::chrono::seconds(100), 4);
  CHECK(by_event + by_timer == 2000);
}
