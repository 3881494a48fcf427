#include "runtime/worker_pool.hpp"

#include "tests/support/async_test.hpp"

#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/fiber/operations.hpp>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace asio = boost::asio;
using vgen::WorkerPool;
using vgen::test::run_async;

TEST_CASE("run returns the result on the caller's executor, off the event loop thread") {
  WorkerPool pool({.name = "t", .threads = 2});
  run_async([&](asio::io_context&) -> asio::awaitable<void> {
    const auto loop_thread = std::this_thread::get_id();
    auto fn = [] { return std::make_pair(std::this_thread::get_id(), WorkerPool::current_thread_index()); };
    auto [worker_thread, index] = co_await pool.run(fn);
    CHECK(worker_thread != loop_thread);
    CHECK(index >= 0);
    CHECK(std::this_thread::get_id() == loop_thread);  // resumed on the loop's thread
    CHECK(WorkerPool::current_thread_index() == -1);
  });
}

TEST_CASE("after_task runs on the task's thread before its completion; its throw is the task's" * doctest::timeout(30)) {
  for (std::size_t threads : {1, 2}) {
    CAPTURE(threads);
    std::atomic<int> fences{0};
    std::atomic<bool> fail_fence{false};
    std::thread::id fence_thread;
    WorkerPool pool({.name = "t", .threads = threads, .after_task = [&] {
                       fence_thread = std::this_thread::get_id();
                       ++fences;
                       if (fail_fence) throw vgen::Error(vgen::ErrorKind::internal, "fence failed");
                     }});
    run_async([&](asio::io_context&) -> asio::awaitable<void> {
      auto value = [] { return std::this_thread::get_id(); };
      const auto ran_on = co_await pool.run(value);
      CHECK(fences == 1);  // already done when the coroutine resumes
      CHECK(fence_thread == ran_on);
      co_await pool.run([] {});
      CHECK(fences == 2);
      fail_fence = true;
      CHECK_THROWS_WITH_AS(co_await pool.run(value), "fence failed", vgen::Error);
      CHECK_THROWS_WITH_AS(co_await pool.run([] {}), "fence failed", vgen::Error);
      CHECK(fences == 4);
    });
  }
}

TEST_CASE("exceptions thrown by the task reach the awaiting coroutine") {
  WorkerPool pool({.name = "t", .threads = 1});
  run_async([&](asio::io_context&) -> asio::awaitable<void> {
    auto failing = []() -> int { throw vgen::Error(vgen::ErrorKind::transient, "boom"); };
    CHECK_THROWS_WITH_AS(co_await pool.run(failing), "boom", vgen::Error);
    auto void_failing = [] { throw std::runtime_error("void boom"); };
    CHECK_THROWS_WITH_AS(co_await pool.run(void_failing), "void boom", std::runtime_error);
    int touched = 0;
    auto ok = [&] { touched = 1; };
    co_await pool.run(ok);
    CHECK(touched == 1);
  });
}

TEST_CASE("blocking compute does not block the event loop" * doctest::timeout(30)) {
  WorkerPool pool({.name = "t", .threads = 1});
  std::atomic<bool> release{false};
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    bool done = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      auto block = [&] { while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1)); };
      co_await pool.run(block);
      done = true;
    }, asio::detached);
    // One loop thread: these timers fire while the worker is still blocked.
    for (int i = 0; i < 5; ++i) co_await vgen::test::sleep_for(std::chrono::milliseconds(2));
    CHECK_FALSE(done);
    release = true;
    while (!done) co_await vgen::test::sleep_for(std::chrono::milliseconds(1));
  });
}

TEST_CASE("many tasks from many coroutines all complete, spread over the threads" * doctest::timeout(60)) {
  for (std::size_t threads : {1u, 2u, 4u}) {
    WorkerPool pool({.name = "t", .threads = threads});
    std::mutex m;
    std::set<int> seen_threads;
    std::atomic<int> sum{0};
    run_async([&](asio::io_context& io) -> asio::awaitable<void> {
      std::atomic<int> left{200};
      for (int i = 1; i <= 200; ++i) {
        asio::co_spawn(io, [&, i]() -> asio::awaitable<void> {
          auto work = [&, i] {
            { std::lock_guard l(m); seen_threads.insert(WorkerPool::current_thread_index()); }
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            return i;
          };
          sum += co_await pool.run(work);
          --left;
        }, asio::detached);
      }
      while (left > 0) co_await vgen::test::sleep_for(std::chrono::milliseconds(1));
    }, vgen::test::default_timeout, 2);
    CHECK(sum == 200 * 201 / 2);
    CHECK(pool.completed() == 200);
    CHECK(seen_threads.size() == threads);
  }
}

TEST_CASE("fibers_per_thread lets a suspended task's thread run the next task" * doctest::timeout(30) *
          doctest::skip(!WorkerPool::runs_tasks_on_fibers())) {
  // One OS thread, two fiber slots: task A suspends its fiber (as a CUDA wait would) until
  // task B has run on the same thread.
  WorkerPool pool({.name = "t", .threads = 1, .fibers_per_thread = 2});
  std::atomic<bool> b_ran{false};
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    std::atomic<int> left{2};
    auto a = [&] { while (!b_ran) boost::this_fiber::yield(); return 1; };
    auto b = [&] { b_ran = true; return 2; };
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { CHECK(co_await pool.run(a) == 1); --left; }, asio::detached);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { CHECK(co_await pool.run(b) == 2); --left; }, asio::detached);
    while (left > 0) co_await vgen::test::sleep_for(std::chrono::milliseconds(1));
  });
  CHECK(b_ran);
}

TEST_CASE("stop runs queued tasks, then refuses new ones with overloaded") {
  WorkerPool pool({.name = "t", .threads = 1});
  pool.stop();
  run_async([&](asio::io_context&) -> asio::awaitable<void> {
    auto fn = [] { return 1; };
    CHECK_THROWS_AS(co_await pool.run(fn), vgen::Error);
  });
  CHECK_THROWS_AS(WorkerPool({.name = "bad", .threads = 0}), vgen::Error);
}
