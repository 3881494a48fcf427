// parse_device_list: `--devices` entries become DeviceSpecs; discovery is a fake callback.
#include "runtime/device_list.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using vgen::DeviceKind;

namespace {

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

Names ids(std::string_view list, const vgen::CudaDiscovery& cuda = {}) {
  Names out;
  for (const auto& s : vgen::parse_device_list(list, cuda)) out.push_back(s.id);
  return out;
}

}  // namespace

TEST_CASE("device kinds have their list names") {
  CHECK(vgen::to_string(DeviceKind::cpu) == "cpu");
  CHECK(vgen::to_string(DeviceKind::cuda) == "cuda");
}

TEST_CASE("parse_device_list: cpu entries") {
  CHECK(ids("cpu") == Names{"cpu:0"});
  CHECK(ids("cpu,cpu") == Names{"cpu:0", "cpu:1"});
  CHECK(ids("cpu:2") == Names{"cpu:2"});
  CHECK(ids("cpu, cpu:0") == Names{"cpu:1", "cpu:0"});  // a bare cpu takes a free index
  CHECK(ids(" CPU ,Cpu ") == Names{"cpu:0", "cpu:1"});
  CHECK(ids("auto") == Names{"cpu:0"});  // no CUDA: one cpu
  const auto specs = vgen::parse_device_list("cpu,cpu", {}, 0.9, 3);
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].kind == DeviceKind::cpu);
  CHECK(specs[0].memory_bytes == 0);
  CHECK(specs[1].max_concurrency == 3);
}

TEST_CASE("parse_device_list: cuda entries through a fake discovery") {
  int calls = 0;
  const vgen::CudaDiscovery two_gpus = [&calls] {
    ++calls;
    return std::vector<vgen::CudaDeviceInfo>{{0, 1000}, {1, 2000}};
  };
  const auto all = vgen::parse_device_list("cuda", two_gpus, 0.5);
  REQUIRE(all.size() == 2);
  CHECK(all[0].id == "cuda:0");
  CHECK(all[0].kind == DeviceKind::cuda);
  CHECK(all[0].memory_bytes == 500);
  CHECK(all[1].memory_bytes == 1000);
  CHECK(all[1].max_concurrency == 1);
  CHECK(ids("cuda:1", two_gpus) == Names{"cuda:1"});
  CHECK(vgen::parse_device_list("cuda:1", two_gpus)[0].memory_bytes == 1800);
  CHECK(ids("auto", two_gpus) == Names{"cuda:0", "cuda:1"});
  CHECK(ids("cuda:0,cpu,cuda:1", two_gpus) == Names{"cuda:0", "cpu:0", "cuda:1"});
  calls = 0;
  CHECK(ids("cpu,cpu:3", two_gpus).size() == 2);
  CHECK(calls == 0);  // discovery runs only when the list needs it, at most once
  CHECK(ids("cuda:0,cuda:1,cpu", two_gpus).size() == 3);
  CHECK(calls == 1);
}

TEST_CASE("parse_device_list: errors name the entry") {
  const vgen::CudaDiscovery one_gpu = [] { return std::vector<vgen::CudaDeviceInfo>{{0, 100}}; };
  check_invalid([] { vgen::parse_device_list(""); }, "empty device list");
  check_invalid([] { vgen::parse_device_list("  "); }, "empty device list");
  check_invalid([] { vgen::parse_device_list("cpu,,cpu"); }, "empty entry");
  check_invalid([] { vgen::parse_device_list("cpu,gpu"); }, "'gpu'");
  check_invalid([] { vgen::parse_device_list("cpu:x"); }, "'cpu:x'");
  check_invalid([] { vgen::parse_device_list("cpu:-1"); }, "'cpu:-1'");
  check_invalid([&] { vgen::parse_device_list("cuda:2", one_gpu); }, "'cuda:2'");
  check_invalid([&] { vgen::parse_device_list("cuda:2", one_gpu); }, "found: 0");
  check_invalid([] { vgen::parse_device_list("cuda:0"); }, "'cuda:0'");
  check_invalid([] { vgen::parse_device_list("cuda"); }, "'cuda'");
  check_invalid([] { vgen::parse_device_list("cpu:0,cpu:0"); }, "'cpu:0' listed twice");
  check_invalid([&] { vgen::parse_device_list("cuda,cuda:0", one_gpu); }, "'cuda:0' listed twice");
  check_invalid([] { vgen::parse_device_list("cpu", {}, 0.0); }, "fraction");
  check_invalid([] { vgen::parse_device_list("cpu", {}, 1.5); }, "fraction");
  check_invalid([] { vgen::parse_device_list("cpu", {}, 0.9, 0); }, "concurrency");
  check_invalid([&] { vgen::parse_device_list("cuda:0", one_gpu, 0.9, 1, 0); }, "threads.per_gpu");
}

TEST_CASE("parse_device_list: cuda_concurrency gives each GPU that many slots sharing one budget") {
  const vgen::CudaDiscovery one_gpu = [] { return std::vector<vgen::CudaDeviceInfo>{{0, 1000}}; };
  for (std::size_t per_gpu : {1, 2, 4}) {
    CAPTURE(per_gpu);
    const auto specs = vgen::parse_device_list("cuda:0,cpu", one_gpu, 0.5, 3, per_gpu);
    REQUIRE(specs.size() == 2);
    CHECK(specs[0].id == "cuda:0");
    CHECK(specs[0].max_concurrency == per_gpu);
    CHECK(specs[0].memory_bytes == 500);  // one budget for the device, whatever the slot count
    CHECK(specs[1].id == "cpu:0");
    CHECK(specs[1].max_concurrency == 3);  // CPU devices keep cpu_concurrency
  }
}
