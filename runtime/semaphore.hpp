// AsyncSemaphore: limits how many coroutines hold a permit at once (stage or device
// concurrency). Permits are granted FIFO: a waiter is never overtaken by a later try_acquire.
//
// Thread-safety: all members may be called from any thread (one mutex).
// Blocking: acquire() suspends the coroutine, never the thread.
// Cancellation: a waiting acquire() is cancellable (terminal/partial/total) and then fails with
// operation_aborted holding nothing. A permit granted is released exactly once: by the Permit
// destructor or Permit::release(), or by the caller of release() after a raw acquire.
// Lifetime: the semaphore must outlive its Permits and pending operations.
#pragma once

#include "runtime/wait_list.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <memory>
#include <mutex>
#include <variant>

namespace vgen {

class AsyncSemaphore {
  using error_code = boost::system::error_code;
  using Sig = void(error_code);

 public:
  explicit AsyncSemaphore(std::size_t permits);
  AsyncSemaphore(const AsyncSemaphore&) = delete;
  AsyncSemaphore& operator=(const AsyncSemaphore&) = delete;

  // RAII ownership of one permit.
  class Permit {
   public:
    Permit() = default;
    explicit Permit(AsyncSemaphore* owner) : owner_(owner) {}
    Permit(Permit&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)) {}
    Permit& operator=(Permit&& o) noexcept {
      if (this != &o) { release(); owner_ = std::exchange(o.owner_, nullptr); }
      return *this;
    }
    ~Permit() { release(); }
    void release() noexcept { if (auto* s = std::exchange(owner_, nullptr)) s->release(); }
    explicit operator bool() const noexcept { return owner_ != nullptr; }

   private:
    AsyncSemaphore* owner_ = nullptr;
  };

  // Raw acquire: completion void(error_code); on success the caller owns one permit.
  template <class Token = boost::asio::use_awaitable_t<>>
  auto acquire(Token&& token = {}) {
    return boost::asio::async_initiate<Token, Sig>(
        [st = state_](auto handler) { st->start_acquire(std::move(handler)); }, token);
  }

  // Acquire wrapped in a Permit that releases on destruction.
  boost::asio::awaitable<Permit> acquire_permit();

  bool try_acquire();
  Permit try_acquire_permit() { return try_acquire() ? Permit(this) : Permit(); }
  void release();

  std::size_t limit() const noexcept;
  std::size_t available() const;
  std::size_t in_use() const;
  std::size_t waiting() const;

 private:
  struct State : std::enable_shared_from_this<State> {
    explicit State(std::size_t n) : limit(n), available(n) {}
    template <class H>
    void start_acquire(H&& handler) {
      std::unique_lock lock(mutex);
      if (available > 0 && waiters.empty()) {
        --available;
        lock.unlock();
        boost::asio::post(boost::asio::append(std::forward<H>(handler), error_code{}));
        return;
      }
      waiters.push(std::forward<H>(handler), std::monostate{}, weak_from_this());
    }
    void cancel(std::uint64_t id);

    mutable std::mutex mutex;
    const std::size_t limit;
    std::size_t available;
    detail::WaitList<std::monostate, Sig> waiters;
  };
  std::shared_ptr<State> state_;
};

}  // namespace vgen
