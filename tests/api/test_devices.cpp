// list_devices: a device list resolved with this build's discovery.
#include "api/devices.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

using namespace vgen;

TEST_CASE("CPU replicas resolve on any machine, in list order") {
  const auto l = list_devices("cpu, CPU:3,cpu");
  REQUIRE(l.devices.size() == 3);
  CHECK(l.devices[0].id == "cpu:0");
  CHECK(l.devices[1].id == "cpu:3");
  CHECK(l.devices[2].id == "cpu:1");
  for (const auto& d : l.devices) CHECK(d.kind == DeviceKind::cpu);
#ifdef VGEN_WITH_TORCH
  CHECK(l.backend.rfind("libtorch ", 0) == 0);
#else
  CHECK(l.backend.empty());
#endif
}

TEST_CASE("auto always resolves to at least one device") {
  CHECK_FALSE(list_devices("auto").devices.empty());
}

TEST_CASE("a bad list is the caller's error") {
  try {
    list_devices("tpu:0");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
  }
}
