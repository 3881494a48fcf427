// Executor: owns the threads. An Asio io_context driven by `io_threads` threads runs all
// orchestration (stage coroutines, channels, timers, HTTP); named WorkerPools run blocking
// compute (one per device, one for media work), so compute never blocks the event loop.
// Describing a pipeline (runtime/pipeline.hpp) is separate from running it here.
//
// Ownership: the Executor owns the io_context, its threads and every WorkerPool it created;
// references returned by pool() stay valid until the Executor is destroyed.
// Thread-safety: add_pool/pool/get_executor may be called from any thread; stop() from any
// thread except an io thread of this executor.
// Shutdown: stop() first stops the worker pools (they finish queued tasks), then lets the
// io_context run out of work (pending completions are delivered) for at most `grace`,
// then stops it and joins its threads. The destructor calls stop().
#pragma once

#include "runtime/device_pool.hpp"
#include "runtime/worker_pool.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vgen {

class Executor {
 public:
  struct Options {
    std::size_t io_threads = 1;
    std::chrono::milliseconds grace{5000};
    // An io thread with nothing to run polls for this long (yielding the CPU) before it blocks:
    // a completion posted from a worker thread then needs no futex wake-up. 0: block at once.
    std::chrono::microseconds spin{50};
  };

  explicit Executor(Options options);
  Executor() : Executor(Options{}) {}
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  boost::asio::io_context& io() noexcept { return io_; }
  boost::asio::any_io_executor get_executor() noexcept { return io_.get_executor(); }

  // Creates a named pool; throws Error(invalid_argument) if the name exists.
  WorkerPool& add_pool(WorkerPool::Options options);
  // Throws Error(not_found) for an unknown name.
  WorkerPool& pool(const std::string& name);
  bool has_pool(const std::string& name) const;

  // Runs `a` on the io_context and blocks the calling (non-io) thread for its result.
  template <class T>
  T run_sync(boost::asio::awaitable<T> a) {
    return boost::asio::co_spawn(io_, std::move(a), boost::asio::use_future).get();
  }

  void stop();
  std::size_t io_thread_count() const noexcept { return options_.io_threads; }
  std::chrono::microseconds spin() const noexcept { return options_.spin; }

 private:
  void run_loop();
  Options options_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<WorkerPool>> pools_;
  bool stopped_ = false;
};

// The worker pool that runs compute for a device: "device:<id>". One place for the name.
std::string device_pool_name(const std::string& device_id);
// What runs on a device pool's threads besides its tasks (runtime/ reaches LibTorch only
// through such callbacks). Both optional.
struct DeviceThreadHooks {
  // Runs first on every device-pool thread, with its device and its index in the pool (set the
  // compute library's intra-op threads, ...).
  std::function<void(const DeviceSpec&, std::size_t thread_index)> on_start;
  // For a device: what runs after each of its tasks (WorkerPool::Options::after_task), or an
  // empty function for nothing.
  std::function<std::function<void()>(const DeviceSpec&)> after_task;
};

// Adds one pool per device and a "codec" pool, all polling as long as the executor's io
// threads (Options::spin) before they block. A CPU device's pool has threads_per_device
// threads; a CUDA device's has one per lease (its max_concurrency, threads.per_gpu).
void add_device_pools(Executor& executor, const std::vector<DeviceSpec>& devices,
                      std::size_t threads_per_device = 1, std::size_t codec_threads = 1,
                      DeviceThreadHooks hooks = {});

}  // namespace vgen
