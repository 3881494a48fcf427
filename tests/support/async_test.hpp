// Test support: run a coroutine to completion with a hard watchdog.
//
// doctest::timeout only reports a slow case after it returns; a hung case would never return.
// run_async therefore drives a fresh io_context from `threads` threads and waits at most
// `timeout` for the coroutine; past that it stops the context and fails the case.
#pragma once

#include <doctest/doctest.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <thread>
#include <vector>

namespace vgen::test {

namespace asio = boost::asio;

inline constexpr std::chrono::seconds default_timeout{60};

// make(io) returns the awaitable to run; it may spawn more work on `io`.
template <class Make>
void run_async(Make make, std::chrono::seconds timeout = default_timeout, int threads = 1) {
  asio::io_context io(threads);
  auto guard = asio::make_work_guard(io);
  std::promise<void> done;
  auto finished = done.get_future();
  asio::co_spawn(io, make(io), [&](std::exception_ptr e) {
    if (e) done.set_exception(e); else done.set_value();
  });
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back([&] { io.run(); });
  const bool in_time = finished.wait_for(timeout) == std::future_status::ready;
  guard.reset();
  // Let run() end by itself first. A worker thread that posted the last completion holds
  // tracked work on `io` until its post returns, and Asio signals its condition variable after
  // unlocking: stopping and destroying `io` at once raced with that thread (ThreadSanitizer,
  // test_worker_pool: pthread_cond_destroy in ~io_context vs pthread_cond_signal in
  // WorkerPool::Completion::complete). Work a case leaves behind is stopped after a grace.
  const auto grace_end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (in_time && !io.stopped() && std::chrono::steady_clock::now() < grace_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  io.stop();
  for (auto& t : pool) t.join();
  REQUIRE_MESSAGE(in_time, "coroutine did not finish within the watchdog timeout");
  finished.get();  // rethrows the coroutine's exception, if any
}

// Suspend the calling coroutine for `d` on its own executor.
inline asio::awaitable<void> sleep_for(std::chrono::steady_clock::duration d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::use_awaitable);
}

}  // namespace vgen::test
