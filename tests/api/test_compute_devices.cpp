// ComputeDevices: the pools and leases a tuned config asks for, and warm-up on each device's
// own compute thread.
#include "api/compute_devices.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

using namespace vgen;

namespace {

RuntimeConfig tuned(std::string devices, std::size_t per_device) {
  RuntimeConfig c;
  c.devices = std::move(devices);
  c.threads_per_device = per_device;
  c.intra_op_threads = 1;
  return c;
}

ErrorKind error_kind_of(const RuntimeConfig& c) {
  Executor executor({.io_threads = 1});
  MetricsRegistry metrics;
  try {
    ComputeDevices devices(c, executor, metrics);
  } catch (const Error& e) {
    executor.stop();
    return e.kind();
  }
  executor.stop();
  FAIL("no error");
  return ErrorKind::internal;
}

}  // namespace

TEST_CASE("a pool per device with threads.per_device leases each, and the codec pool" * doctest::timeout(60)) {
  for (std::size_t per_device : {1, 3}) {
    CAPTURE(per_device);
    Executor executor({.io_threads = 1});
    MetricsRegistry metrics;
    ComputeDevices devices(tuned("cpu,cpu", per_device), executor, metrics);
    REQUIRE(devices.devices().size() == 2);
    CHECK(devices.leases() == 2 * per_device);
    CHECK(executor.has_pool("codec"));
    for (const auto& d : devices.devices()) {
      CHECK(executor.has_pool(device_pool_name(d.id)));
      CHECK(d.max_concurrency == per_device);  // a CPU device admits one lease per compute thread
    }
    CHECK(devices.pool().size() == 2);
    executor.stop();
  }
}

TEST_CASE("warm_up runs on each device's compute thread in turn and exports its time" * doctest::timeout(60)) {
  Executor executor({.io_threads = 1});
  MetricsRegistry metrics;
  ComputeDevices devices(tuned("cpu,cpu", 1), executor, metrics);
  std::mutex mutex;
  std::vector<std::pair<std::string, std::thread::id>> seen;
  devices.warm_up([&](const std::string& id) {
    std::lock_guard lock(mutex);
    seen.emplace_back(id, std::this_thread::get_id());
  });
  REQUIRE(seen.size() == 2);
  const auto text = metrics.render_prometheus();
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(seen[i].first == devices.devices()[i].id);
    CHECK(seen[i].second != std::this_thread::get_id());
    CHECK(text.find("vgen_warmup_seconds{device=\"" + seen[i].first + "\"}") != std::string::npos);
  }
  CHECK(seen[0].second != seen[1].second);  // each device's own thread
  CHECK_THROWS_WITH_AS(devices.warm_up([](const std::string&) { throw std::runtime_error("cold"); }), "cold", std::runtime_error);
  executor.stop();
}

TEST_CASE("settings still \"auto\" are refused; a device list that does not resolve is invalid_argument") {
  CHECK(error_kind_of(RuntimeConfig{}) == ErrorKind::internal);
  CHECK(error_kind_of(tuned("tpu", 1)) == ErrorKind::invalid_argument);
}
