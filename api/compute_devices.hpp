// ComputeDevices: where a Runtime's model calls run, set up from its config once the "auto"
// settings are numbers (api/runtime_tuning.hpp): the devices config.devices names, a worker
// pool per device on the executor ("device:<id>": threads.per_device compute threads, each
// running LibTorch with threads.intra_op intra-op threads) plus the "codec" pool
// (threads.codec), and the DevicePool that leases them under config.device_policy. A CPU device
// admits as many concurrent leases as it has compute threads, so that with threads.per_device
// > 1 the preprocess, denoise and decode of different jobs overlap. A CUDA device admits
// threads.per_gpu leases (default 1), with a compute thread each; with more than one, each
// thread runs on its own CUDA stream (stages/model/torch_devices.hpp) and waits for it at the
// end of each task, so that one job's kernels run while another lease's thread is on the host
// (text encoding, scheduler math, copies to host). The leases share the GPU's memory budget.
//
// Ownership: the pools belong to the executor (which must outlive every lease and warm-up);
// the DevicePool is this object's. Thread-safety: the constructor and warm_up block and run
// once, at start; pool() is as thread-safe as DevicePool. No LibTorch in this header.
#pragma once

#include "api/config.hpp"
#include "runtime/device_pool.hpp"
#include "runtime/executor.hpp"
#include "runtime/metrics.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace vgen {

class ComputeDevices {
 public:
  // Error(invalid_argument) for a device list that does not resolve. config.threads_per_device
  // and config.intra_op_threads must be numbers (not kAuto).
  ComputeDevices(const RuntimeConfig& config, Executor& executor, MetricsRegistry& metrics);

  DevicePool& pool() noexcept { return *pool_; }
  const std::vector<DeviceSpec>& devices() const noexcept { return devices_; }
  // Compute leases of all devices together (threads.per_device per CPU device, threads.per_gpu
  // per CUDA device).
  std::size_t leases() const noexcept { return leases_; }

  // Runs `warm(device id)` on each device's compute thread in turn and waits for it (config
  // "warmup": the first calls of a model are slow); exports vgen_warmup_seconds{device}.
  // Rethrows what `warm` throws.
  void warm_up(const std::function<void(const std::string&)>& warm);

 private:
  Executor& executor_;
  MetricsRegistry& metrics_;
  std::vector<DeviceSpec> devices_;
  std::size_t leases_ = 0;
  std::unique_ptr<DevicePool> pool_;
};

}  // namespace vgen
