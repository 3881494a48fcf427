#include "runtime/worker_pool.hpp"

#include <boost/fiber/all.hpp>
#include <spdlog/spdlog.h>

#include <deque>
#include <mutex>

namespace vgen {

namespace {
thread_local int tls_index = -1;
thread_local const WorkerPool* tls_pool = nullptr;

}  // namespace

// The task queue shared by the pool's threads. Producers are ordinary threads (Asio's), so
// it is a std::mutex-guarded deque; consumers are fibers, which wait on a fiber condition
// variable so that waiting suspends only the dispatcher fiber. (Boost 1.81 has no unbounded
// fiber channel, and buffered_channel::push would block the producing Asio thread when full.)
struct WorkerPool::Queue {
  std::mutex mutex;
  std::deque<std::unique_ptr<detail::PoolTask>> tasks;
  bool closed = false;
  boost::fibers::condition_variable_any ready;

  bool push(std::unique_ptr<detail::PoolTask>& task) {
    {
      std::lock_guard lock(mutex);
      if (closed) return false;
      tasks.push_back(std::move(task));
    }
    ready.notify_one();
    return true;
  }
  // Waits for a task; false once closed and drained.
  bool pop(std::unique_ptr<detail::PoolTask>& task) {
    std::unique_lock lock(mutex);
    ready.wait(lock, [&] { return closed || !tasks.empty(); });
    if (tasks.empty()) return false;
    task = std::move(tasks.front());
    tasks.pop_front();
    return true;
  }
  void close() {
    { std::lock_guard lock(mutex); closed = true; }
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
  boost::fibers::mutex m;
  boost::fibers::condition_variable slot_free;
  std::size_t alive = 0;
  std::unique_ptr<detail::PoolTask> task;
  while (queue_->pop(task)) {
    --queued_;
    {
      std::unique_lock lock(m);
      slot_free.wait(lock, [&] { return alive < options_.fibers_per_thread; });
      ++alive;
    }
    boost::fibers::fiber([&, t = std::move(task)]() mutable {
      ++running_;
      t->run();
      t.reset();
      --running_;
      ++completed_;
      std::unique_lock lock(m);
      --alive;
      slot_free.notify_all();
    }).detach();
    boost::this_fiber::yield();  // let the task start before this thread takes another one
  }
  std::unique_lock lock(m);
  slot_free.wait(lock, [&] { return alive == 0; });  // finish this thread's fibers
}

int WorkerPool::current_thread_index() noexcept { return tls_index; }
const WorkerPool* WorkerPool::current_pool() noexcept { return tls_pool; }

}  // namespace vgen
