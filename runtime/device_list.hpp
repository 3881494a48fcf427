// The devices a pool can run work on, and the `--devices` list that names them.
//
// A DeviceSpec is plain data (an id, a kind, a memory budget, a slot count). parse_device_list
// turns a user's comma-separated list into specs; real CUDA discovery (through LibTorch) lives
// in stages/model/torch_devices and reaches it as a CudaDiscovery callback, so parsing runs with
// simulated GPUs in tests.
// Thread-safety: stateless; parse_device_list may run concurrently (it calls `cuda` on the
// calling thread). Blocking: only as long as the discovery callback blocks.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

enum class DeviceKind { cpu, cuda };
std::string_view to_string(DeviceKind kind) noexcept;

struct DeviceSpec {
  std::string id;                   // "cpu:0", "cuda:1": unique within a pool
  DeviceKind kind = DeviceKind::cpu;
  std::size_t memory_bytes = 0;     // budget; 0 = unlimited
  std::size_t max_concurrency = 1;  // leases held at once
};

struct CudaDeviceInfo {
  int index = 0;
  std::size_t total_memory = 0;  // 0 = unknown: the budget is then unlimited
};
using CudaDiscovery = std::function<std::vector<CudaDeviceInfo>()>;

// Parses a comma-separated device list (case and spaces around entries are ignored):
//   cpu      the next CPU replica: ids "cpu:0", "cpu:1", ... (the lowest index not yet taken)
//   cpu:N    CPU replica N
//   cuda:N   CUDA device N, which discovery must report
//   cuda     every CUDA device discovery reports (at least one)
//   auto     every CUDA device if there is one, else one CPU replica
// CPU devices get an unlimited memory budget and cpu_concurrency slots; CUDA devices
// cuda_concurrency slots (config "threads.per_gpu": leases on one GPU, each on its own compute
// thread) sharing total_memory * memory_fraction bytes. `cuda` is called at most once, and only when the
// list names cuda or auto; no callback means no CUDA devices. Throws
// vgen::Error(invalid_argument) naming the offending entry for an empty list or entry, an
// unknown entry, a CUDA index discovery did not report, a device listed twice,
// memory_fraction outside (0, 1], cpu_concurrency 0 or cuda_concurrency 0.
std::vector<DeviceSpec> parse_device_list(std::string_view list, const CudaDiscovery& cuda = {},
                                          double memory_fraction = 0.9,
                                          std::size_t cpu_concurrency = 1,
                                          std::size_t cuda_concurrency = 1);

}  // namespace vgen
