// AsyncEvent: a one-shot, manual-reset event. wait() completes once set() has been called
// (immediately if it already was). Used for job completion and shutdown notifications.
//
// Thread-safety: all members may be called from any thread.
// Cancellation: a waiting wait() is cancellable and fails with operation_aborted. Emit the
// cancellation on the waiter's strand (runtime/wait_list.hpp): e.g. `wait() || timer` on an
// io_context with several threads must run on a strand.
// Lifetime: the event must outlive pending waits.
#pragma once

#include "runtime/wait_list.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <mutex>
#include <variant>

namespace vgen {

class AsyncEvent {
  using error_code = boost::system::error_code;
  using Sig = void(error_code);

 public:
  AsyncEvent();
  AsyncEvent(const AsyncEvent&) = delete;
  AsyncEvent& operator=(const AsyncEvent&) = delete;

  template <class Token = boost::asio::use_awaitable_t<>>
  auto wait(Token&& token = {}) {
    return boost::asio::async_initiate<Token, Sig>(
        [st = state_](auto handler) { st->start_wait(std::move(handler)); }, token);
  }

  void set();  // idempotent; wakes every waiter
  bool is_set() const;

 private:
  struct State : std::enable_shared_from_this<State> {
    template <class H>
    void start_wait(H&& handler) {
      std::unique_lock lock(mutex);
      if (set) {
        lock.unlock();
        boost::asio::post(boost::asio::append(std::forward<H>(handler), error_code{}));
        return;
      }
      waiters.push(std::forward<H>(handler), std::monostate{}, weak_from_this());
    }
    void cancel(std::uint64_t id);

    mutable std::mutex mutex;
    bool set = false;
    detail::WaitList<std::monostate, Sig> waiters;
  };
  std::shared_ptr<State> state_;
};

}  // namespace vgen
