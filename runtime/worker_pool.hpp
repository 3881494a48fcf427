// WorkerPool: dedicated OS threads for blocking compute (LibTorch, FFmpeg), so that a compute
// call never blocks the Asio event loop.
//
// Model: each worker thread runs its own Boost.Fiber scheduler. A dispatcher fiber takes tasks
// from one shared fiber channel and runs each as a fiber on that thread, with at most
// `fibers_per_thread` task fibers alive per thread. A task that only computes (CPU) runs to
// completion, and with fibers_per_thread = 1 tasks run directly on the thread's main fiber. A task that
// waits for a GPU stream (boost::fibers::cuda::waitfor_all) suspends only its fiber, and the
// thread meanwhile launches the next task's kernels: CPU-side launch work overlaps GPU
// execution without more OS threads. Fibers never migrate between threads, and never touch
// Asio state other than posting a completion (see docs/ARCHITECTURE.md).
//
// run(f): queues f, completes on the awaiting coroutine's executor with f's result or
// exception. Signature void(std::exception_ptr, R) (R default-constructible), or
// void(std::exception_ptr) for void f. Not cancellable once queued: compute runs to the end;
// callers check cancellation before and after.
// Thread-safety: run(), stop() and the getters may be called from any thread.
// Lifetime: stop() (also called by the destructor) refuses new work, runs every task already
// queued, then joins the threads. A run() after stop() completes with Error(overloaded).
#pragma once

#include "runtime/errors.hpp"

#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution/blocking.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace vgen {

namespace detail {
// Polls `ready()` for up to `spin`, yielding the CPU between polls (so a spinning thread never
// starves a runnable one on a small machine); true as soon as it holds. Used by idle worker-pool
// and io threads before they block.
template <class Ready>
bool poll_for(std::chrono::microseconds spin, Ready&& ready) {
  if (spin.count() <= 0) return ready();
  const auto until = std::chrono::steady_clock::now() + spin;
  for (;;) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
}

struct PoolTask {
  virtual ~PoolTask() = default;
  virtual void run() = 0;                        // never throws
  virtual void fail(std::exception_ptr error) = 0;  // completes without running
};
}  // namespace detail

class WorkerPool {
 public:
  struct Options {
    std::string name = "compute";
    std::size_t threads = 1;
    std::size_t fibers_per_thread = 1;
    // An idle worker polls for this long (yielding the CPU) before it blocks on a condition
    // variable: back-to-back tasks then skip a futex sleep/wake-up per hand-off. 0: block at once.
    std::chrono::microseconds spin{50};
    // Runs first on every worker thread (bind a CUDA device, set intra-op threads, ...).
    std::function<void(std::size_t thread_index)> on_thread_start;
    // Runs on the worker thread after each task's function returns and before its completion
    // is posted (e.g. wait for the thread's CUDA stream, so that the awaiting coroutine may hand
    // the task's tensors to another thread). What it throws becomes the task's exception.
    std::function<void()> after_task;
  };

  explicit WorkerPool(Options options);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  template <class F, class Token = boost::asio::use_awaitable_t<>>
  auto run(F f, Token&& token = {}) {
    using R = std::invoke_result_t<F&>;
    if constexpr (std::is_void_v<R>) {
      return boost::asio::async_initiate<Token, void(std::exception_ptr)>(
          [this](auto handler, F fn) { submit_void(std::move(handler), std::move(fn)); },
          token, std::move(f));
    } else {
      return boost::asio::async_initiate<Token, void(std::exception_ptr, R)>(
          [this](auto handler, F fn) { submit_value<R>(std::move(handler), std::move(fn)); },
          token, std::move(f));
    }
  }

  void stop();
  const std::string& name() const noexcept { return options_.name; }
  std::size_t thread_count() const noexcept { return options_.threads; }
  std::size_t queued() const noexcept { return queued_.load(); }
  std::size_t running() const noexcept { return running_.load(); }
  std::uint64_t completed() const noexcept { return completed_.load(); }

  // False only in AddressSanitizer builds, which run each task directly on its thread.
  static bool runs_tasks_on_fibers() noexcept;
  // The index of the calling worker thread in its pool, or -1 off the pool's threads.
  static int current_thread_index() noexcept;
  static const WorkerPool* current_pool() noexcept;

 private:
  template <class Sig>
  struct Completion {
    boost::asio::any_completion_handler<Sig> handler;
    boost::asio::any_completion_executor work;
    template <class H>
    explicit Completion(H&& h) : handler(std::forward<H>(h)) {
      boost::asio::any_completion_executor ex =
          boost::asio::get_associated_executor(handler, boost::asio::system_executor());
      work = boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked);
    }
    template <class... Args>
    void complete(Args... args) {
      auto ex = boost::asio::prefer(std::move(work), boost::asio::execution::blocking.never);
      ex.execute([h = std::move(handler), ... a = std::move(args)]() mutable {
        std::move(h)(std::move(a)...);
      });
    }
  };

  template <class R, class F, class H>
  void submit_value(H&& handler, F fn) {
    struct Task final : detail::PoolTask {
      Completion<void(std::exception_ptr, R)> done;
      F fn;
      WorkerPool* pool;
      Task(H&& h, F f, WorkerPool* p) : done(std::forward<H>(h)), fn(std::move(f)), pool(p) {}
      void run() override {
        try {
          R result = fn();
          if (pool->options_.after_task) pool->options_.after_task();
          done.complete(std::exception_ptr(), std::move(result));
        } catch (...) {
          done.complete(std::current_exception(), R{});
        }
      }
      void fail(std::exception_ptr e) override { done.complete(e, R{}); }
    };
    enqueue(std::make_unique<Task>(std::forward<H>(handler), std::move(fn), this));
  }

  template <class F, class H>
  void submit_void(H&& handler, F fn) {
    struct Task final : detail::PoolTask {
      Completion<void(std::exception_ptr)> done;
      F fn;
      WorkerPool* pool;
      Task(H&& h, F f, WorkerPool* p) : done(std::forward<H>(h)), fn(std::move(f)), pool(p) {}
      void run() override {
        std::exception_ptr error;
        try {
          fn();
          if (pool->options_.after_task) pool->options_.after_task();
        } catch (...) { error = std::current_exception(); }
        done.complete(error);
      }
      void fail(std::exception_ptr e) override { done.complete(e); }
    };
    enqueue(std::make_unique<Task>(std::forward<H>(handler), std::move(fn), this));
  }

  void enqueue(std::unique_ptr<detail::PoolTask> task);
  void thread_main(std::size_t index);

  struct Queue;  // fiber channel; defined in the .cpp to keep Boost.Fiber out of this header
  Options options_;
  std::unique_ptr<Queue> queue_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopped_{false};
  std::atomic<std::size_t> queued_{0}, running_{0};
  std::atomic<std::uint64_t> completed_{0};
};

}  // namespace vgen
