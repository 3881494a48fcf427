#include "api/compute_devices.hpp"

#include "runtime/errors.hpp"
#include "stages/model/torch_devices.hpp"

#include <boost/asio/use_future.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <string>

namespace vgen {

ComputeDevices::ComputeDevices(const RuntimeConfig& config, Executor& executor, MetricsRegistry& metrics)
    : executor_(executor), metrics_(metrics) {
  if (config.threads_per_device == RuntimeConfig::kAuto || config.intra_op_threads == RuntimeConfig::kAuto)
    throw_error(ErrorKind::internal, "compute devices: threads.per_device and threads.intra_op must be tuned first");
  devices_ = parse_device_list(config.devices, discover_cuda_devices, 0.9, config.threads_per_device, config.threads_per_gpu);
  for (const auto& d : devices_) leases_ += d.max_concurrency;
  // Every compute thread of a GPU queues its kernels on LibTorch's default stream, one lease or
  // several: a stream per thread lets LibTorch's caching allocator hand a block to one stream
  // while another stream's kernels still read it (compute_devices.hpp), and one stream orders
  // every launch, so a block freed by any thread is reused only after the work queued before it.
  DeviceThreadHooks hooks;
  hooks.on_start = [intra = static_cast<int>(config.intra_op_threads)](const DeviceSpec& d, std::size_t i) {
    set_intra_op_threads(intra);
    if (d.kind == DeviceKind::cuda && d.max_concurrency > 1 && i == 0)
      spdlog::info("{}: {} leases, their compute threads queueing on one CUDA stream (LibTorch's default)", d.id,
                   d.max_concurrency);
  };
  add_device_pools(executor_, devices_, config.threads_per_device, config.codec_threads, std::move(hooks));
  pool_ = std::make_unique<DevicePool>(devices_, DevicePoolOptions{.policy = config.device_policy, .metrics = &metrics_});
}

void ComputeDevices::warm_up(const std::function<void(const std::string&)>& warm) {
  for (const auto& d : devices_) {
    const auto t0 = std::chrono::steady_clock::now();
    auto task = [&warm, id = d.id] {
      warm(id);
      return 0;
    };
    executor_.pool(device_pool_name(d.id)).run(std::move(task), boost::asio::use_future).get();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
    metrics_.gauge("vgen_warmup_seconds", "Start-up warm-up of the model on a device", {{"device", d.id}}).set(took.count());
    spdlog::info("warmed up the model on {} in {:.2f} s", d.id, took.count());
  }
}

}  // namespace vgen
