// ComputeDevices: where a Runtime's model calls run, set up from its config once the "auto"
// settings are numbers (api/runtime_tuning.hpp): the devices config.devices names, a worker
// pool per device on the executor ("device:<id>": threads.per_device compute threads, each
// running LibTorch with threads.intra_op intra-op threads) plus the "codec" pool
// (threads.codec), and the DevicePool that leases them under config.device_policy. A CPU device
// admits as many concurrent leases as it has compute threads, so that with threads.per_device
// > 1 the preprocess, denoise and decode of different jobs overlap. A CUDA device admits
// threads.per_gpu leases (default 1), with a compute thread each, so that one lease's thread
// queues kernels while another's is on the host (the TorchScript interpreter, text encoding,
// scheduler math, copies to host). The leases share the GPU's memory budget and its one
// CUDA stream, LibTorch's default: with a stream per thread, a tensor that one thread's stream
// allocated and another thread frees mid-task (a denoise step replacing latents an earlier step
// made on the other thread) goes back to the first stream's cache while the second stream's
// kernels may still read it, and the first thread's next allocation can take it and write
// over it. LibTorch's caching allocator knows only the allocating stream; closing that needs
// Tensor::record_stream on every tensor that crosses threads, which no hook here can find.
// One stream orders every launch of the device, so a freed block is reused only after all work
// queued before its free. What that costs against two streams (their kernels overlapping) is
// measured by the GPU check's vgen_leases phase (docs/PERFORMANCE.md).
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
