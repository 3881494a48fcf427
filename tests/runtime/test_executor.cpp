#include "runtime/executor.hpp"

#include <doctest/doctest.h>

#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <thread>

namespace asio = boost::asio;
using vgen::Executor;

TEST_CASE("run_sync drives a coroutine that offloads compute to a named pool" * doctest::timeout(30)) {
  for (std::size_t io_threads : {1u, 3u}) {
    Executor ex({.io_threads = io_threads});
    auto& pool = ex.add_pool({.name = "device:cpu:0", .threads = 2});
    CHECK(ex.has_pool("device:cpu:0"));
    CHECK(&ex.pool("device:cpu:0") == &pool);
    const auto caller = std::this_thread::get_id();
    auto result = ex.run_sync([&]() -> asio::awaitable<int> {
      CHECK(std::this_thread::get_id() != caller);
      auto square = [] { return 7 * 7; };
      co_return co_await pool.run(square);
    }());
    CHECK(result == 49);
    ex.stop();
    ex.stop();  // idempotent
  }
}

TEST_CASE("pool names are unique and unknown names are reported") {
  Executor ex;
  ex.add_pool({.name = "codec"});
  CHECK_THROWS_AS(ex.add_pool({.name = "codec"}), vgen::Error);
  CHECK_THROWS_AS(ex.pool("nope"), vgen::Error);
}

TEST_CASE("stop delivers pending completions before joining" * doctest::timeout(30)) {
  Executor ex({.io_threads = 2});
  std::atomic<int> fired{0};
  for (int i = 0; i < 10; ++i) {
    asio::co_spawn(ex.io(), [&]() -> asio::awaitable<void> {
      asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(20));
      co_await t.async_wait(asio::use_awaitable);
      ++fired;
    }, asio::detached);
  }
  ex.stop();
  CHECK(fired == 10);
}
