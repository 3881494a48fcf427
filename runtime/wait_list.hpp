// A FIFO of suspended asynchronous operations: the shared mechanism under the channel,
// the semaphore and the event.
//
// Ownership: an owner (channel, semaphore, event) keeps its state in a std::shared_ptr and a
// WaitList inside it. A suspended operation is one Waiter: its type-erased completion handler,
// a payload (the value a sender offers, or nothing), and tracked work on the handler's
// executor so that io_context::run() does not return while an operation is suspended.
//
// Thread-safety: a WaitList is not synchronised; the owner guards it with its own mutex and
// completes waiters only after releasing that mutex (complete() posts, never runs inline).
//
// Cancellation: push() connects the handler's cancellation slot (terminal, partial and total
// cancellation are all safe: a suspended operation has had no side effect yet). On emission
// the owner's cancel(id) removes the waiter, if it is still queued, and completes it with
// operation_aborted. As with Asio's own channels, a cancellation signal must not be emitted
// concurrently with the operation's own completion on another thread. Emitting it from the
// awaiting coroutine's executor is safe only when that executor runs one thing at a time (a
// strand, or an io_context with one thread): awaitable operators (`a || b`) and parallel
// groups emit into the losing branch from the thread that completed the winner, so on an
// io_context with several threads they must run on a strand (ThreadSanitizer reported
// cancellation_signal::emit racing cancellation_slot::clear; tests/runtime/test_event.cpp).
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/blocking.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/execution/relationship.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/system/error_code.hpp>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace vgen::detail {

namespace asio = boost::asio;
using error_code = boost::system::error_code;

template <class Payload, class Signature>
class WaitList;

template <class Payload, class... Args>
class WaitList<Payload, void(error_code, Args...)> {
 public:
  using Handler = asio::any_completion_handler<void(error_code, Args...)>;

  struct Waiter {
    std::uint64_t id = 0;
    Payload payload;
    Handler handler;
    asio::any_completion_executor work;  // outstanding work on the handler's executor, if it has one

    // Post the completion to the handler's executor; the waiter is consumed.
    void complete(error_code ec, Args... args) && {
      // any_completion_executor cannot be required to be non-blocking (asio::post needs
      // that), but it can be preferred to be: the same guarantee for every executor we use.
      auto ex = asio::prefer(std::move(work), asio::execution::blocking.never,
                             asio::execution::relationship.fork);
      ex.execute([h = std::move(handler), ec, ... a = std::move(args)]() mutable {
        std::move(h)(ec, std::move(a)...);
      });
    }
  };

  // Queue an operation. `owner` is a weak_ptr to an object with cancel(std::uint64_t id);
  // its slot handler holds only the weak_ptr so a late emission after the owner is gone is
  // harmless. Call with the owner's mutex held.
  template <class H, class Owner>
  std::uint64_t push(H&& handler, Payload payload, std::weak_ptr<Owner> owner) {
    const std::uint64_t id = ++last_id_;
    Waiter w{id, std::move(payload), Handler(std::forward<H>(handler)), {}};
    // any_completion_handler wraps the handler's slot in its own cancellation state, which
    // takes over the original slot: connect to the slot it exposes, not the original one.
    auto slot = w.handler.get_cancellation_slot();
    if (slot.is_connected()) {
      slot.assign([owner, id](asio::cancellation_type type) {
        using ct = asio::cancellation_type;
        if ((type & (ct::terminal | ct::partial | ct::total)) == ct::none) return;
        if (auto o = owner.lock()) o->cancel(id);
      });
    }
    w.work = track_work(w.handler);
    waiters_.push_back(std::move(w));
    return id;
  }

  bool empty() const noexcept { return waiters_.empty(); }
  std::size_t size() const noexcept { return waiters_.size(); }

  Waiter pop_front() {
    Waiter w = std::move(waiters_.front());
    waiters_.pop_front();
    return w;
  }

  std::optional<Waiter> remove(std::uint64_t id) {
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      if (it->id == id) {
        Waiter w = std::move(*it);
        waiters_.erase(it);
        return w;
      }
    }
    return std::nullopt;
  }

  std::vector<Waiter> take_all() {
    std::vector<Waiter> all;
    all.reserve(waiters_.size());
    for (auto& w : waiters_) all.push_back(std::move(w));
    waiters_.clear();
    return all;
  }

 private:
  static asio::any_completion_executor track_work(const Handler& h) {
    asio::any_completion_executor ex = asio::get_associated_executor(h, asio::system_executor());
    return asio::prefer(ex, asio::execution::outstanding_work.tracked);
  }

  // A list, not a deque: erasing from the middle of a deque move-assigns its neighbours, and
  // Boost 1.81's any_completion_handler move assignment recurses without end (it swaps with
  // a copy built by its own wrapping constructor). List erasure moves nothing.
  std::list<Waiter> waiters_;
  std::uint64_t last_id_ = 0;
};

}  // namespace vgen::detail
