#include "runtime/device_pool.hpp"

#include "runtime/errors.hpp"
#include "runtime/metrics.hpp"
#include "tests/support/async_test.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <array>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

namespace asio = boost::asio;
using boost::system::error_code;
using vgen::DeviceKind;
using vgen::DeviceLease;
using vgen::DevicePool;
using vgen::DevicePoolOptions;
using vgen::DeviceSpec;
using vgen::DeviceStatus;
using vgen::PlacementRequest;
using vgen::test::run_async;

namespace {

std::vector<DeviceSpec> cpus(const std::vector<std::size_t>& concurrency,
                             std::size_t memory_bytes = 0) {
  std::vector<DeviceSpec> specs;
  for (std::size_t i = 0; i < concurrency.size(); ++i)
    specs.push_back({"cpu:" + std::to_string(i), DeviceKind::cpu, memory_bytes, concurrency[i]});
  return specs;
}

PlacementRequest req(std::string model = {}, std::size_t model_bytes = 0,
                     std::size_t work_bytes = 0) {
  return {std::move(model), model_bytes, work_bytes};
}

DevicePoolOptions with_policy(std::string policy, std::size_t max_overtakes = 16) {
  DevicePoolOptions o;
  o.policy = std::move(policy);
  o.max_overtakes = max_overtakes;
  return o;
}

template <class F>
void check_invalid(F&& f, const std::string& needle) {
  try {
    f();
    FAIL("expected vgen::Error(invalid_argument) mentioning '" << needle << "'");
  } catch (const vgen::Error& e) {
    CHECK(e.kind() == vgen::ErrorKind::invalid_argument);
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

using Names = std::vector<std::string>;

Names resident(const DevicePool& pool, std::size_t device) {
  return pool.status()[device].resident_models;
}
std::size_t used(const DevicePool& pool, std::size_t device) {
  return pool.status()[device].memory_used;
}

// The device index a try_acquire got, or -1 for none.
int where(const std::optional<DeviceLease>& lease) {
  return lease ? static_cast<int>(lease->index()) : -1;
}

// A single-threaded loop driven by poll(); the guard keeps poll() from stopping it when idle.
struct PollLoop {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(io);
};

// A callback acquire whose result lands in `lease` / `ec` once `io` runs the completion.
struct Outcome {
  error_code ec;
  DeviceLease lease;
  bool done = false;
};
auto into(asio::io_context& io, Outcome& out) {
  return asio::bind_executor(io, [&out](error_code ec, DeviceLease lease) {
    out.ec = ec;
    out.lease = std::move(lease);
    out.done = true;
  });
}

}  // namespace

TEST_CASE("the pool rejects bad device lists and unknown policies") {
  check_invalid([] { DevicePool pool({}); }, "device");
  check_invalid([] { DevicePool pool({{"cpu:0"}, {"cpu:0"}}); }, "'cpu:0'");
  check_invalid([] { DevicePool pool({{"cpu:0", DeviceKind::cpu, 0, 0}}); }, "max_concurrency");
  check_invalid([] { DevicePool pool(cpus({1}), with_policy("fastest")); }, "'fastest'");
  check_invalid([] { DevicePool pool(cpus({1}), with_policy("fastest")); }, "least_loaded");
  DevicePool pool(cpus({1, 2}));
  CHECK(pool.size() == 2);
  CHECK(pool.device(1).id == "cpu:1");
  CHECK_THROWS_AS((void)pool.device(2), std::out_of_range);
}

TEST_CASE("try_acquire never waits and a lease returns its slot") {
  DevicePool pool(cpus({1, 1}));
  auto a = pool.try_acquire(req());
  auto b = pool.try_acquire(req());
  REQUIRE((a && b));
  CHECK(a->index() != b->index());
  CHECK_FALSE(pool.try_acquire(req()));  // all busy
  DeviceLease moved = std::move(*a);
  CHECK_FALSE(*a);
  CHECK(moved.device().id == "cpu:" + std::to_string(moved.index()));
  moved.release();
  CHECK_FALSE(moved);
  moved.release();  // idempotent
  CHECK_THROWS_AS((void)moved.device(), std::logic_error);
  auto c = pool.try_acquire(req());
  CHECK(c);
  const auto status = pool.status();
  CHECK(status[0].active + status[1].active == 2);
  CHECK(status[0].leases_granted + status[1].leases_granted == 3);
}

// Runs body(pool, i) for i in [0, workers) as concurrent coroutines on `threads` io threads;
// returns the pool's final status after checking that every lease came back.
template <class Body>
std::vector<DeviceStatus> stress(std::vector<DeviceSpec> specs, int workers, int threads,
                                 Body body) {
  std::vector<DeviceStatus> final_status;
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    DevicePool pool(specs);
    std::atomic<int> finished{0};
    for (int i = 0; i < workers; ++i) {
      asio::co_spawn(io, [&, i]() -> asio::awaitable<void> {
        co_await body(pool, i);
        ++finished;
      }, asio::detached);
    }
    while (finished < workers) co_await vgen::test::sleep_for(std::chrono::milliseconds(1));
    final_status = pool.status();
    CHECK(pool.waiting() == 0);
  }, vgen::test::default_timeout, threads);
  std::uint64_t total = 0;
  for (const auto& s : final_status) {
    total += s.leases_granted;
    CHECK(s.active == 0);
  }
  CHECK(total == static_cast<std::uint64_t>(workers));
  return final_status;
}

TEST_CASE("200 coroutines: per-device limits hold and work spreads" * doctest::timeout(120)) {
  const std::vector<std::size_t> limits{1, 2, 1};
  constexpr int workers = 200;
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    std::array<std::atomic<int>, 3> active{};
    std::atomic<bool> over_limit{false};
    auto body = [&](DevicePool& pool, int i) -> asio::awaitable<void> {
      PlacementRequest r = req("model-" + std::to_string(i % 3));
      DeviceLease lease = co_await pool.acquire(std::move(r), asio::use_awaitable);
      const std::size_t d = lease.index();
      if (++active[d] > static_cast<int>(limits[d])) over_limit = true;
      for (int k = 0; k < 3; ++k)  // hold the lease across suspensions
        co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      // Simulated compute. Without it a whole run takes about a millisecond, and with more
      // io threads than cores one OS preemption of the thread resuming a holder stalls that
      // device for most of the run: the spread would then measure the OS scheduler.
      co_await vgen::test::sleep_for(std::chrono::microseconds(200));
      --active[d];  // before the slot can be handed on
    };
    const auto status = stress(cpus(limits), workers, threads, body);
    CHECK_FALSE(over_limit.load());
    REQUIRE(status.size() == 3);
    for (std::size_t d = 0; d < 3; ++d) {
      CAPTURE(d);
      CAPTURE(status[d].leases_granted);
      // Work goes to whichever device frees a slot, so each device serves in proportion to
      // its slots (1:2:1). One io thread is exact; with more, allow for OS scheduling.
      const double share = static_cast<double>(workers * limits[d]) / 4.0;
      const double granted = static_cast<double>(status[d].leases_granted);
      if (threads == 1) CHECK(std::abs(granted - share) <= share / 10.0);
      CHECK(granted >= share / 4.0);
    }
  }
}

TEST_CASE("memory budgets hold under concurrency" * doctest::timeout(120)) {
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    std::atomic<bool> over_budget{false}, not_resident{false};
    auto body = [&](DevicePool& pool, int i) -> asio::awaitable<void> {
      PlacementRequest r = req("m" + std::to_string(i % 4), 30, 10 + 10 * (i % 3));
      const std::string model = r.model;
      DeviceLease lease = co_await pool.acquire(std::move(r), asio::use_awaitable);
      for (int k = 0; k < 2; ++k) {
        const auto status = pool.status();
        for (const auto& s : status)
          if (s.memory_used > s.memory_bytes) over_budget = true;
        const auto& mine = status[lease.index()].resident_models;
        if (std::find(mine.begin(), mine.end(), model) == mine.end()) not_resident = true;
        co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      }
    };
    for (const auto& s : stress(cpus({3, 3}, 100), 120, threads, body))
      CHECK(s.memory_used == 30 * s.resident_models.size());  // only idle models remain
    CHECK_FALSE(over_budget.load());
    CHECK_FALSE(not_resident.load());
  }
}

TEST_CASE("least_loaded is sticky: a model returns to the device that has it") {
  DevicePool pool(cpus({1, 2, 1}));
  auto x = pool.try_acquire(req("x"));
  auto a = pool.try_acquire(req("a"));
  CHECK(where(x) == 0);
  CHECK(where(a) == 1);
  x.reset();
  a.reset();
  // leases_granted is {1, 1, 0}: without stickiness "a" would go to device 2.
  auto a1 = pool.try_acquire(req("a"));
  auto a2 = pool.try_acquire(req("a"));
  CHECK(where(a1) == 1);
  CHECK(where(a2) == 1);  // while device 1 has capacity
  auto a3 = pool.try_acquire(req("a"));
  CHECK(where(a3) == 2);  // device 1 is full: least loaded, fewest leases
  auto b = pool.try_acquire(req("b"));
  CHECK(where(b) == 0);
  CHECK_FALSE(pool.try_acquire(req("a")));
  CHECK(resident(pool, 0) == Names{"x", "b"});
  CHECK(resident(pool, 1) == Names{"a"});
  CHECK(resident(pool, 2) == Names{"a"});
}

TEST_CASE("memory budgets: sticky models, LRU eviction of idle models only") {
  DevicePool pool({{"cpu:0", DeviceKind::cpu, 100, 3}});
  auto a = pool.try_acquire(req("A", 40, 10));
  CHECK(used(pool, 0) == 50);
  a.reset();
  CHECK(used(pool, 0) == 40);  // A stays resident
  auto b = pool.try_acquire(req("B", 40, 10));
  CHECK(used(pool, 0) == 90);
  b.reset();
  CHECK(pool.try_acquire(req("A", 40, 5)));  // A is resident: only 5 more bytes
  CHECK(resident(pool, 0) == Names{"B", "A"});  // B is now the least recently used
  auto c = pool.try_acquire(req("C", 40, 10));  // 80 + 50 > 100: evict B only
  CHECK(where(c) == 0);
  CHECK(resident(pool, 0) == Names{"A", "C"});
  CHECK(used(pool, 0) == 90);
  CHECK(pool.status()[0].evictions == 1);
  // D needs 60: evicting idle A leaves 50 + 60 > 100 and C is active: nothing is evicted.
  CHECK_FALSE(pool.try_acquire(req("D", 50, 10)));
  CHECK(resident(pool, 0) == Names{"A", "C"});
  c.reset();
  auto d = pool.try_acquire(req("D", 50, 10));  // evicting A (the older) is enough
  CHECK(where(d) == 0);
  CHECK(resident(pool, 0) == Names{"C", "D"});
  CHECK(used(pool, 0) == 100);
  CHECK(pool.status()[0].evictions == 2);
}

TEST_CASE("a device that fits without eviction is preferred") {
  DevicePool pool(cpus({1, 1}, 100));
  CHECK(where(pool.try_acquire(req("A", 60, 10))) == 0);
  auto b = pool.try_acquire(req("B", 60, 10));
  CHECK(where(b) == 1);
  CHECK(resident(pool, 0) == Names{"A"});
  CHECK(pool.status()[0].evictions == 0);
}

TEST_CASE("a waiter that needs an eviction is served once the model goes idle") {
  PollLoop loop;
  DevicePool pool({{"cpu:0", DeviceKind::cpu, 100, 2}});
  auto b = pool.try_acquire(req("B", 50, 10));
  Outcome a;
  pool.acquire(req("A", 60, 10), into(loop.io, a));  // B is active: no room
  loop.io.poll();
  CHECK_FALSE(a.done);
  CHECK(pool.waiting() == 1);
  b.reset();
  loop.io.poll();
  REQUIRE(a.done);
  CHECK(a.lease);
  CHECK(resident(pool, 0) == Names{"A"});
}

TEST_CASE("a request that can never fit fails at once") {
  DevicePool pool({{"cpu:0", DeviceKind::cpu, 100, 1}, {"cpu:1", DeviceKind::cpu, 50, 1}});
  check_invalid([&] { (void)pool.try_acquire(req("huge", 80, 30)); }, "'huge'");
  check_invalid([&] { (void)pool.try_acquire(req("huge", 80, 30)); }, "largest 100");
  check_invalid([&] { pool.acquire(req("huge", 80, 30), [](error_code, DeviceLease) {}); },
                "'huge'");
  check_invalid([&] { (void)pool.try_acquire(req("x", SIZE_MAX, 1)); }, "overflows");
  CHECK(pool.waiting() == 0);
  CHECK(pool.try_acquire(req("exact", 90, 10)));  // exactly the budget is fine
  run_async([&](asio::io_context&) -> asio::awaitable<void> {
    bool threw = false;
    try {
      co_await pool.acquire(req("huge", 80, 30), asio::use_awaitable);
    } catch (const vgen::Error& e) {
      threw = e.kind() == vgen::ErrorKind::invalid_argument;
    }
    CHECK(threw);
  });
  DevicePool unlimited({{"cpu:0", DeviceKind::cpu, 100, 1}, {"cpu:1", DeviceKind::cpu, 0, 1}});
  CHECK(where(unlimited.try_acquire(req("huge", 80, 30))) == 1);
}

TEST_CASE("a cancelled acquire holds nothing and later waiters are served") {
  PollLoop loop;
  auto& io = loop.io;
  DevicePool pool(cpus({1}));
  auto held = pool.try_acquire(req());
  asio::cancellation_signal cancel;
  Outcome first, second;
  pool.acquire(req("first"), asio::bind_cancellation_slot(cancel.slot(), into(io, first)));
  pool.acquire(req("second"), into(io, second));
  io.poll();
  CHECK(pool.waiting() == 2);
  cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  REQUIRE(first.done);
  CHECK(first.ec == asio::error::operation_aborted);
  CHECK_FALSE(first.lease);
  CHECK(pool.waiting() == 1);
  held.reset();
  io.poll();
  REQUIRE(second.done);
  CHECK_FALSE(second.ec);
  CHECK(second.lease);
  CHECK(pool.status()[0].leases_granted == 2);
  CHECK(resident(pool, 0) == Names{"second"});
}

TEST_CASE("cancelling the waiter that holds the line lets the others through") {
  PollLoop loop;
  auto& io = loop.io;
  DevicePool pool(cpus({2}, 100), with_policy("least_loaded", 0));  // strict FIFO
  auto held = pool.try_acquire(req("", 0, 50));
  asio::cancellation_signal cancel;
  Outcome big, small;
  pool.acquire(req("", 0, 60), asio::bind_cancellation_slot(cancel.slot(), into(io, big)));
  pool.acquire(req("", 0, 10), into(io, small));
  io.poll();
  CHECK_FALSE(small.done);  // it would fit, but strict FIFO keeps it behind the big one
  cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  CHECK(big.ec == asio::error::operation_aborted);
  REQUIRE(small.done);
  CHECK(small.lease);
}

TEST_CASE("a timed-out acquire in an awaitable operator leaves the pool clean"
          * doctest::timeout(60)) {
  using namespace asio::experimental::awaitable_operators;
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    run_async([](asio::io_context& io) -> asio::awaitable<void> {
      DevicePool pool(cpus({1}));
      auto strand = asio::make_strand(io);
      auto held = pool.try_acquire(req("busy"));
      auto race = [&]() -> asio::awaitable<void> {
        auto result = co_await (pool.acquire(req("late")) ||
                                vgen::test::sleep_for(std::chrono::milliseconds(5)));
        CHECK(result.index() == 1);  // the device stays busy: the timer wins
        CHECK(pool.waiting() == 0);
        Outcome next;
        std::atomic<bool> served{false};
        pool.acquire(req("next"), asio::bind_executor(strand, [&](error_code ec, DeviceLease l) {
          next.ec = ec;
          next.lease = std::move(l);
          served = true;
        }));
        CHECK(pool.waiting() == 1);
        held.reset();
        while (!served) co_await asio::post(strand, asio::use_awaitable);
        CHECK_FALSE(next.ec);
        CHECK(next.lease.device().id == "cpu:0");
      };
      co_await asio::co_spawn(strand, race, asio::use_awaitable);
    }, vgen::test::default_timeout, threads);
  }
}

TEST_CASE("strict FIFO serves waiters in arrival order") {
  PollLoop loop;
  auto& io = loop.io;
  DevicePool pool(cpus({1}), with_policy("least_loaded", 0));
  auto held = pool.try_acquire(req());
  std::vector<int> order;
  std::vector<DeviceLease> leases;
  for (int i = 0; i < 5; ++i)
    pool.acquire(req(), asio::bind_executor(io, [&, i](error_code ec, DeviceLease l) {
      if (!ec) order.push_back(i);
      leases.push_back(std::move(l));
    }));
  CHECK_FALSE(pool.try_acquire(req()));
  held.reset();
  for (int i = 0; i < 5; ++i) {
    io.poll();
    REQUIRE(leases.size() == static_cast<std::size_t>(i + 1));
    leases.back().release();
  }
  io.poll();
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
}

TEST_CASE("a waiter that cannot be placed is overtaken at most max_overtakes times") {
  PollLoop loop;
  auto& io = loop.io;
  DevicePool pool(cpus({3}, 100), with_policy("least_loaded", 2));
  auto a = pool.try_acquire(req("", 0, 60));
  Outcome big, late;
  pool.acquire(req("", 0, 80), into(io, big));
  CHECK(pool.try_acquire(req("", 0, 30)));  // overtakes the big one (1)
  CHECK(pool.try_acquire(req("", 0, 30)));  // (2)
  CHECK_FALSE(pool.try_acquire(req("", 0, 30)));  // the big one now holds the line
  pool.acquire(req("", 0, 30), into(io, late));
  io.poll();
  CHECK(pool.waiting() == 2);
  a.reset();  // 80 fits now; 80 + 30 does not
  io.poll();
  REQUIRE(big.done);
  CHECK(big.lease);
  CHECK_FALSE(late.done);
  big.lease.release();
  io.poll();
  REQUIRE(late.done);
  CHECK(late.lease);
}

TEST_CASE("destroying the pool aborts its waiters; leases outlive it") {
  PollLoop loop;
  auto& io = loop.io;
  std::optional<DeviceLease> held;
  Outcome waiter;
  {
    DevicePool pool(cpus({1}));
    held = pool.try_acquire(req());
    pool.acquire(req(), into(io, waiter));
    io.poll();
    CHECK(pool.waiting() == 1);
  }
  io.poll();
  REQUIRE(waiter.done);
  CHECK(waiter.ec == asio::error::operation_aborted);
  REQUIRE(held);
  CHECK(held->device().id == "cpu:0");
  held.reset();  // harmless after the pool is gone
}

TEST_CASE("round_robin cycles through the devices that admit") {
  DevicePool pool(cpus({2, 1, 2}), with_policy("round_robin"));
  std::vector<std::optional<DeviceLease>> held;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) order.push_back(where(held.emplace_back(pool.try_acquire(req()))));
  CHECK(order == std::vector<int>{0, 1, 2, 0, 2});  // device 1 has one slot
  CHECK_FALSE(pool.try_acquire(req()));
  held[1].reset();  // device 1
  CHECK(where(pool.try_acquire(req())) == 1);
}

TEST_CASE("a registered policy is chosen by name; a faulty one cannot wedge the pool") {
  struct LastCandidate : vgen::PlacementPolicy {
    explicit LastCandidate(std::shared_ptr<int> calls) : calls_(std::move(calls)) {}
    std::size_t choose(const std::vector<DeviceStatus>& devices,
                       const std::vector<std::size_t>& candidates,
                       const PlacementRequest&) override {
      CHECK(devices.size() == 3);
      ++*calls_;
      return candidates.back();
    }
    std::shared_ptr<int> calls_;
  };
  struct Broken : vgen::PlacementPolicy {
    std::size_t choose(const std::vector<DeviceStatus>&, const std::vector<std::size_t>&,
                       const PlacementRequest&) override {
      return 42;
    }
  };
  auto calls = std::make_shared<int>(0);
  vgen::register_placement_policy("test_last_candidate",
                                  [calls] { return std::make_unique<LastCandidate>(calls); });
  vgen::register_placement_policy("test_broken", [] { return std::make_unique<Broken>(); });
  const auto names = vgen::placement_policy_names();
  CHECK(std::find(names.begin(), names.end(), "test_last_candidate") != names.end());
  DevicePool pool(cpus({1, 1, 1}), with_policy("test_last_candidate"));
  auto a = pool.try_acquire(req());
  auto b = pool.try_acquire(req());
  CHECK(where(a) == 2);
  CHECK(where(b) == 1);
  CHECK(where(pool.try_acquire(req())) == 0);
  CHECK(*calls == 3);
  DevicePool broken(cpus({1, 1, 1}), with_policy("test_broken"));
  auto c = broken.try_acquire(req());
  CHECK(where(c) == 0);  // falls back to the first candidate
  CHECK(where(broken.try_acquire(req())) == 1);
}

TEST_CASE("metrics track active leases, memory, grants and the queue") {
  PollLoop loop;
  auto& io = loop.io;
  vgen::MetricsRegistry metrics;
  DevicePoolOptions options;
  options.metrics = &metrics;
  DevicePool pool({{"cpu:0", DeviceKind::cpu, 100, 1}}, options);
  const vgen::Labels dev{{"device", "cpu:0"}};
  auto& active = metrics.gauge("vgen_device_active", "", dev);
  auto& memory = metrics.gauge("vgen_device_memory_used_bytes", "", dev);
  auto& leases = metrics.counter("vgen_device_leases_total", "", dev);
  auto& queue = metrics.gauge("vgen_device_queue_depth", "");
  auto a = pool.try_acquire(req("A", 40, 10));
  CHECK(active.value() == 1);
  CHECK(memory.value() == 50);
  CHECK(leases.value() == 1);
  Outcome w;
  pool.acquire(req("B", 70, 10), into(io, w));
  CHECK(queue.value() == 1);
  a.reset();
  io.poll();
  REQUIRE(w.done);
  CHECK(queue.value() == 0);
  CHECK(active.value() == 1);
  CHECK(memory.value() == 80);  // A was evicted for B
  CHECK(leases.value() == 2);
  CHECK(metrics.counter("vgen_device_evictions_total", "", dev).value() == 1);
  const std::string text = metrics.render_prometheus();
  CHECK(text.find("vgen_device_active{device=\"cpu:0\"} 1") != std::string::npos);
  CHECK(text.find("vgen_device_queue_depth 0") != std::string::npos);
  CHECK(text.find("vgen_device_slots{device=\"cpu:0\"} 1") != std::string::npos);
  CHECK(text.find("vgen_device_memory_budget_bytes{device=\"cpu:0\"} 100") != std::string::npos);
}

// threads.per_gpu: a simulated GPU from parse_device_list with two slots and one budget.
TEST_CASE("two leases on cuda:0 run at once and share its memory budget") {
  const vgen::CudaDiscovery one_gpu = [] { return std::vector<vgen::CudaDeviceInfo>{{0, 1000}}; };
  vgen::MetricsRegistry metrics;
  DevicePoolOptions options;
  options.metrics = &metrics;
  DevicePool pool(vgen::parse_device_list("cuda:0", one_gpu, 1.0, 1, 2), options);
  CHECK(metrics.render_prometheus().find("vgen_device_slots{device=\"cuda:0\"} 2") != std::string::npos);
  // The same model for two jobs: resident once (400), each lease books its own work memory.
  auto a = pool.try_acquire(req("wan", 400, 250));
  auto b = pool.try_acquire(req("wan", 400, 250));
  REQUIRE(a);
  REQUIRE(b);
  CHECK(pool.status()[0].active == 2);
  CHECK(used(pool, 0) == 900);
  // A third lease has no slot, even with memory to spare.
  CHECK_FALSE(pool.try_acquire(req("wan", 400, 50)));
  b.reset();
  // Two leases cannot together exceed the budget: 400 + 250 + 400 > 1000.
  CHECK_FALSE(pool.try_acquire(req("wan", 400, 400)));
  CHECK(used(pool, 0) == 650);
  auto c = pool.try_acquire(req("wan", 400, 350));  // 400 + 250 + 350 = 1000: fits exactly
  REQUIRE(c);
  CHECK(used(pool, 0) == 1000);
  for (const auto& s : pool.status()) CHECK(s.memory_used <= s.memory_bytes);
}

TEST_CASE("two leases on cuda:0 under concurrency never exceed its slots or budget" * doctest::timeout(120)) {
  const vgen::CudaDiscovery one_gpu = [] { return std::vector<vgen::CudaDeviceInfo>{{0, 1000}}; };
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    std::atomic<bool> over{false};
    std::atomic<int> active{0}, most{0};
    auto body = [&](DevicePool& pool, int i) -> asio::awaitable<void> {
      DeviceLease lease = co_await pool.acquire(req("wan", 400, 200 + 100 * (i % 3)), asio::use_awaitable);
      const int now = ++active;
      for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
      }
      for (const auto& s : pool.status())
        if (s.memory_used > s.memory_bytes || s.active > 2) over = true;
      co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      --active;
    };
    stress(vgen::parse_device_list("cuda:0", one_gpu, 1.0, 1, 2), 60, threads, body);
    CHECK_FALSE(over.load());
    CHECK(most.load() <= 2);
  }
}
