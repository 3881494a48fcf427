#include "runtime/event.hpp"

#include "tests/support/async_test.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detached.hpp>
#include <atomic>

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
