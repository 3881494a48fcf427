#include "runtime/worker_pool.hpp"

#include <boost/fiber/all.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>
#include <deque>
#include <mutex>
#include <optional>

namespace vgen {

namespace {
thread_local int tls_index = -1;
thread_local const WorkerPool* tls_pool = nullptr;

}  // namespace

// The task queue shared by the pool's threads. Producers are ordinary (Asio) threads, so it
// is a std::mutex-guarded deque with a *thread-level* condition variable: an idle worker
// (no task fiber alive) blocks its whole thread, which is what an idle thread should do.
// We deliberately avoid fiber primitives here: waking a fiber from a foreign thread races
// with that thread's scheduler teardown in Boost 1.81 (round_robin::notify broadcasts after
// unlocking; ThreadSanitizer reports it), and Boost 1.81 has no unbounded fiber channel.
// An idle worker first polls for up to `spin` (yielding the CPU each time) before it blocks:
// while work keeps arriving, a hand-off then costs no futex sleep and wake-up on either side.
struct WorkerPool::Queue {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::unique_ptr<detail::PoolTask>> tasks;
  std::atomic<bool> closed{false};       // written under the mutex, polled without it
  std::atomic<std::size_t> pending{0};  // tasks.size(), readable without the lock

  bool push(std::unique_ptr<detail::PoolTask>& task) {
    {
      std::lock_guard lock(mutex);
      if (closed) return false;
      tasks.push_back(std::move(task));
      pending.store(tasks.size(), std::memory_order_release);
    }
    ready.notify_one();  // no system call unless a worker is blocked
    return true;
  }
  // Blocks the thread until a task arrives; false once closed and drained.
  bool pop_wait(std::unique_ptr<detail::PoolTask>& task, std::chrono::microseconds spin) {
    detail::poll_for(spin, [&] { return pending.load(std::memory_order_acquire) != 0 || closed.load(); });
    std::unique_lock lock(mutex);
    ready.wait(lock, [&] { return closed || !tasks.empty(); });
    return take(task);
  }
  // Never blocks: a task, end of queue (false), or nothing yet (nullopt).
  std::optional<bool> try_pop(std::unique_ptr<detail::PoolTask>& task) {
    std::lock_guard lock(mutex);
    if (tasks.empty() && !closed) return std::nullopt;
    return take(task);
  }
  bool take(std::unique_ptr<detail::PoolTask>& task) {
    if (tasks.empty()) return false;
    task = std::move(tasks.front());
    tasks.pop_front();
    pending.store(tasks.size(), std::memory_order_release);
    return true;
  }
  void close() {
    {
      std::lock_guard lock(mutex);
      closed = true;
    }
    ready.notify_all();
  }
};

WorkerPool::WorkerPool(Options options) : options_(std::move(options)), queue_(std::make_unique<Queue>()) {
  if (options_.threads == 0) throw Error(ErrorKind::invalid_argument, "WorkerPool '" + options_.name + "': threads must be >= 1");
  if (options_.fibers_per_thread == 0)
    throw Error(ErrorKind::invalid_argument, "WorkerPool '" + options_.name + "': fibers_per_thread must be >= 1");
  threads_.reserve(options_.threads);
  for (std::size_t i = 0; i < options_.threads; ++i) threads_.emplace_back([this, i] { thread_main(i); });
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::stop() {
  if (stopped_.exchange(true)) {
    for (auto& t : threads_) if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
    return;
  }
  queue_->close();  // pop() still drains the tasks already queued
  for (auto& t : threads_) if (t.joinable()) t.join();
}

void WorkerPool::enqueue(std::unique_ptr<detail::PoolTask> task) {
  ++queued_;
  if (!stopped_.load() && queue_->push(task)) return;
  --queued_;
  // Not accepted (the pool is stopping): fail it so its awaiting coroutine resumes with an
  // error instead of waiting forever.
  task->fail(std::make_exception_ptr(
      Error(ErrorKind::overloaded, "worker pool '" + options_.name + "' is stopped")));
}

void WorkerPool::thread_main(std::size_t index) {
  tls_index = static_cast<int>(index);
  tls_pool = this;
  if (options_.on_thread_start) {
    try {
      options_.on_thread_start(index);
    } catch (const std::exception& e) {
      spdlog::error("worker pool '{}' thread {}: start hook failed: {}", options_.name, index, e.what());
    }
  }
  // Everything below stays on this thread: the task fibers and the dispatcher (this
  // function's main fiber) only ever wake each other, never a fiber of another thread.
  boost::fibers::mutex m;
  boost::fibers::condition_variable slot_free;
  std::size_t alive = 0;
  std::unique_ptr<detail::PoolTask> task;
  for (;;) {
    if (alive == 0) {
      if (!queue_->pop_wait(task, options_.spin)) break;
    } else {
      // Task fibers are suspended (e.g. waiting for a GPU stream): poll so that they can
      // resume, instead of blocking the thread they run on.
      auto got = queue_->try_pop(task);
      if (!got) {
        boost::this_fiber::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      if (!*got) break;
    }
    --queued_;
    {
      std::unique_lock lock(m);
      slot_free.wait(lock, [&] { return alive < options_.fibers_per_thread; });
      ++alive;
    }
    auto body = [&, t = std::move(task)]() mutable {
      ++running_;
      t->run();
      t.reset();
      --running_;
      ++completed_;
      std::unique_lock lock(m);
      --alive;
      slot_free.notify_all();
    };
    // One fiber slot: nothing can run beside the task, so it runs on the thread's main fiber
    // (creating a fiber and its stack per task cost more than a short task itself). The
    // AddressSanitizer build never switches stacks (see runs_tasks_on_fibers).
    if (options_.fibers_per_thread == 1 || !runs_tasks_on_fibers()) {
      body();
      continue;
    }
    boost::fibers::fiber(std::move(body)).detach();
    boost::this_fiber::yield();  // let the task start before this thread takes another one
  }
  std::unique_lock lock(m);
  slot_free.wait(lock, [&] { return alive == 0; });  // finish this thread's fibers
}

bool WorkerPool::runs_tasks_on_fibers() noexcept {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer cannot follow Boost.Context's fcontext stack switches in Debian's build
  // (it reports stack-buffer-underflow on fiber stacks); ASan builds run tasks directly.
  return false;
#else
  return true;
#endif
}

int WorkerPool::current_thread_index() noexcept { return tls_index; }
const WorkerPool* WorkerPool::current_pool() noexcept { return tls_pool; }

}  // namespace vgen
