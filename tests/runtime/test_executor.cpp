#include "runtime/executor.hpp"

#include <doctest/doctest.h>

#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

// threads.per_gpu: a simulated GPU's pool has a thread per lease; the hooks see its spec.
TEST_CASE("add_device_pools: a CUDA device gets a thread per lease, CPU devices threads_per_device" * doctest::timeout(30)) {
  Executor ex;
  const std::vector<vgen::DeviceSpec> devices{{"cpu:0", vgen::DeviceKind::cpu, 0, 3},
                                              {"cuda:0", vgen::DeviceKind::cuda, 1000, 2}};
  std::mutex m;
  std::multiset<std::pair<std::string, std::size_t>> started;
  std::atomic<int> gpu_fences{0};
  vgen::DeviceThreadHooks hooks;
  hooks.on_start = [&](const vgen::DeviceSpec& d, std::size_t i) {
    std::lock_guard lock(m);
    started.insert({d.id, i});
  };
  hooks.after_task = [&](const vgen::DeviceSpec& d) -> std::function<void()> {
    if (d.kind != vgen::DeviceKind::cuda) return {};
    return [&] { ++gpu_fences; };
  };
  vgen::add_device_pools(ex, devices, 3, 1, hooks);
  CHECK(ex.pool(vgen::device_pool_name("cpu:0")).thread_count() == 3);
  CHECK(ex.pool(vgen::device_pool_name("cuda:0")).thread_count() == 2);
  CHECK(ex.pool("codec").thread_count() == 1);
  ex.run_sync([&]() -> asio::awaitable<void> {
    co_await ex.pool(vgen::device_pool_name("cpu:0")).run([] {});
    CHECK(gpu_fences == 0);
    co_await ex.pool(vgen::device_pool_name("cuda:0")).run([] {});
    CHECK(gpu_fences == 1);
  }());
  ex.stop();  // joins the threads: every start hook has run
  CHECK(started == std::multiset<std::pair<std::string, std::size_t>>{
                       {"cpu:0", 0}, {"cpu:0", 1}, {"cpu:0", 2}, {"cuda:0", 0}, {"cuda:0", 1}});
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
