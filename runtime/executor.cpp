#include "runtime/executor.hpp"

#include <spdlog/spdlog.h>

namespace vgen {

Executor::Executor(Options options)
    : options_(options),
      io_(static_cast<int>(std::max<std::size_t>(1, options.io_threads))),
      work_(io_.get_executor()) {
  if (options_.io_threads == 0)
    throw Error(ErrorKind::invalid_argument, "executor: io_threads must be >= 1");
  for (std::size_t i = 0; i < options_.io_threads; ++i)
    threads_.emplace_back([this] {
      for (;;) {
        try {
          run_loop();
          return;
        } catch (const std::exception& e) {
          // A handler threw: log it and keep the loop alive rather than lose the thread.
          spdlog::error("event loop handler threw: {}", e.what());
        }
      }
    });
}

// io_context::run(), except that an idle thread polls (yielding) for options_.spin before it
// blocks in run_one(). Returns when the context has stopped (no work left, or stop()).
void Executor::run_loop() {
  if (options_.spin.count() <= 0) {
    io_.run();
    return;
  }
  while (!io_.stopped()) {
    const bool ran = detail::poll_for(options_.spin, [&] { return io_.poll() > 0 || io_.stopped(); });
    if (!ran) io_.run_one();
  }
}

Executor::~Executor() { stop(); }

WorkerPool& Executor::add_pool(WorkerPool::Options options) {
  std::lock_guard lock(mutex_);
  if (stopped_) throw Error(ErrorKind::overloaded, "executor is stopped");
  auto name = options.name;
  auto [it, inserted] = pools_.try_emplace(name, nullptr);
  if (!inserted) throw Error(ErrorKind::invalid_argument, "worker pool '" + name + "' already exists");
  it->second = std::make_unique<WorkerPool>(std::move(options));
  return *it->second;
}

WorkerPool& Executor::pool(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = pools_.find(name);
  if (it == pools_.end()) throw Error(ErrorKind::not_found, "no worker pool named '" + name + "'");
  return *it->second;
}

bool Executor::has_pool(const std::string& name) const {
  std::lock_guard lock(mutex_);
  return pools_.count(name) != 0;
}

void Executor::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
  }
  for (auto& [name, p] : pools_) p->stop();
  work_.reset();
  // Let pending completions run; past the grace period stop the loop outright.
  const auto deadline = std::chrono::steady_clock::now() + options_.grace;
  while (!io_.stopped() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!io_.stopped()) {
    spdlog::warn("executor: event loop still busy after {} ms; stopping it", options_.grace.count());
    io_.stop();
  }
  for (auto& t : threads_) t.join();
}

std::string device_pool_name(const std::string& device_id) { return "device:" + device_id; }

void add_device_pools(Executor& executor, const std::vector<DeviceSpec>& devices, std::size_t threads_per_device,
                      std::size_t codec_threads, DeviceThreadHooks hooks) {
  for (const auto& d : devices) {
    WorkerPool::Options options{.name = device_pool_name(d.id),
                                .threads = d.kind == DeviceKind::cuda ? d.max_concurrency : threads_per_device,
                                .spin = executor.spin()};
    if (hooks.on_start) options.on_thread_start = [start = hooks.on_start, d](std::size_t i) { start(d, i); };
    if (hooks.after_task) options.after_task = hooks.after_task(d);
    executor.add_pool(std::move(options));
  }
  executor.add_pool({.name = "codec", .threads = codec_threads, .spin = executor.spin()});
}

}  // namespace vgen
