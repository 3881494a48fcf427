// BoundedChannel<T>: an awaitable multi-producer multi-consumer queue with a fixed capacity
// and explicit end-of-stream semantics.
//
// Contract
//  - enqueue(v) waits while the channel is full (backpressure) and completes once v is
//    accepted. An accepted item is always delivered to exactly one dequeue; close() never
//    discards accepted items (unlike asio::experimental::concurrent_channel::close() in
//    Boost 1.81, which drops buffered items: see shared/STACK.md).
//  - enqueue on a closed channel fails with channel_errc::closed; the item was not accepted
//    and stays with the caller's exception (nothing is silently lost).
//  - dequeue() waits while the channel is empty and open; it returns std::nullopt only once
//    the channel is closed *and* drained: that is the end-of-stream marker.
//  - close() is idempotent. Producers still waiting on a full channel fail with `closed`.
//  - try_enqueue / try_dequeue never wait.
//  - Items are handed over FIFO; waiting producers and consumers are served FIFO.
//
// Thread-safety: every member may be called from any thread; one mutex guards the state and
// completions are posted to each waiter's executor after the mutex is released.
// Cancellation: a waiting enqueue or dequeue is cancellable (terminal/partial/total) through
// its handler's cancellation slot and then fails with operation_aborted without side effects:
// the item of a cancelled enqueue was not accepted; a cancelled dequeue took nothing.
// Lifetime: the channel must outlive the operations started on it.
#pragma once

#include "runtime/wait_list.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <variant>

namespace vgen {

enum class channel_errc { closed = 1 };
const boost::system::error_category& channel_category() noexcept;
inline boost::system::error_code make_error_code(channel_errc e) noexcept {
  return {static_cast<int>(e), channel_category()};
}

}  // namespace vgen

template <>
struct boost::system::is_error_code_enum<vgen::channel_errc> : std::true_type {};

namespace vgen {

template <class T>
class BoundedChannel {
  using error_code = boost::system::error_code;
  using SendSig = void(error_code);
  using RecvSig = void(error_code, std::optional<T>);

 public:
  explicit BoundedChannel(std::size_t capacity) : state_(std::make_shared<State>(capacity)) {
    if (capacity == 0) throw std::invalid_argument("BoundedChannel capacity must be >= 1");
  }
  BoundedChannel(const BoundedChannel&) = delete;
  BoundedChannel& operator=(const BoundedChannel&) = delete;

  // Waits while full. Completion: void(error_code): success, channel_errc::closed or
  // operation_aborted. With use_awaitable a failure throws boost::system::system_error.
  template <class Token = boost::asio::use_awaitable_t<>>
  auto enqueue(T value, Token&& token = {}) {
    return boost::asio::async_initiate<Token, SendSig>(
        [st = state_](auto handler, T v) { st->start_send(std::move(handler), std::move(v)); },
        token, std::move(value));
  }

  // Waits while empty and open. Completion: void(error_code, optional<T>); nullopt means
  // closed and drained (end of stream).
  template <class Token = boost::asio::use_awaitable_t<>>
  auto dequeue(Token&& token = {}) {
    return boost::asio::async_initiate<Token, RecvSig>(
        [st = state_](auto handler) { st->start_receive(std::move(handler)); }, token);
  }

  // Never waits. Moves from `value` only when it was accepted.
  bool try_enqueue(T& value) { return state_->try_send(value); }
  bool try_enqueue(T&& value) { return state_->try_send(value); }
  std::optional<T> try_dequeue() { return state_->try_receive(); }

  void close() { state_->close(); }
  bool is_closed() const { std::lock_guard lock(state_->mutex); return state_->closed; }
  // Items buffered and accepted but not yet dequeued.
  std::size_t size() const { std::lock_guard lock(state_->mutex); return state_->items.size(); }
  std::size_t capacity() const noexcept { return state_->capacity; }
  std::size_t waiting_producers() const { std::lock_guard l(state_->mutex); return state_->senders.size(); }
  std::size_t waiting_consumers() const { std::lock_guard l(state_->mutex); return state_->receivers.size(); }

 private:
  struct State : std::enable_shared_from_this<State> {
    explicit State(std::size_t cap) : capacity(cap) {}

    template <class H>
    void start_send(H&& handler, T value) {
      std::unique_lock lock(mutex);
      if (closed) {
        lock.unlock();
        complete_now<SendSig>(std::forward<H>(handler), make_error_code(channel_errc::closed));
        return;
      }
      if (!receivers.empty()) {  // a consumer waits: the buffer is empty, hand over directly
        auto r = receivers.pop_front();
        lock.unlock();
        std::move(r).complete(error_code{}, std::optional<T>(std::move(value)));
        complete_now<SendSig>(std::forward<H>(handler), error_code{});
        return;
      }
      if (items.size() < capacity) {
        items.push_back(std::move(value));
        lock.unlock();
        complete_now<SendSig>(std::forward<H>(handler), error_code{});
        return;
      }
      senders.push(std::forward<H>(handler), std::move(value), this->weak_from_this());
    }

    template <class H>
    void start_receive(H&& handler) {
      std::unique_lock lock(mutex);
      if (auto item = take_locked()) {
        auto released = admit_waiting_sender_locked();
        lock.unlock();
        if (released) std::move(*released).complete(error_code{});
        complete_now<RecvSig>(std::forward<H>(handler), error_code{}, std::move(item));
        return;
      }
      if (closed) {
        lock.unlock();
        complete_now<RecvSig>(std::forward<H>(handler), error_code{}, std::optional<T>());
        return;
      }
      receivers.push(std::forward<H>(handler), std::monostate{}, this->weak_from_this());
    }

    bool try_send(T& value) {
      std::unique_lock lock(mutex);
      if (closed) return false;
      if (!receivers.empty()) {
        auto r = receivers.pop_front();
        lock.unlock();
        std::move(r).complete(error_code{}, std::optional<T>(std::move(value)));
        return true;
      }
      if (items.size() >= capacity) return false;
      items.push_back(std::move(value));
      return true;
    }

    std::optional<T> try_receive() {
      std::unique_lock lock(mutex);
      auto item = take_locked();
      auto released = item ? admit_waiting_sender_locked() : std::nullopt;
      lock.unlock();
      if (released) std::move(*released).complete(error_code{});
      return item;
    }

    void close() {
      std::unique_lock lock(mutex);
      if (closed) return;
      closed = true;
      auto blocked = senders.take_all();  // their items were never accepted
      auto idle = receivers.take_all();   // non-empty only when the buffer is empty
      lock.unlock();
      for (auto& s : blocked) std::move(s).complete(make_error_code(channel_errc::closed));
      for (auto& r : idle) std::move(r).complete(error_code{}, std::optional<T>());
    }

    // Called from a cancellation slot.
    void cancel(std::uint64_t id) {
      std::unique_lock lock(mutex);
      auto s = senders.remove(id);
      auto r = s ? std::nullopt : receivers.remove(id);
      lock.unlock();
      if (s) std::move(*s).complete(boost::asio::error::operation_aborted);
      if (r) std::move(*r).complete(boost::asio::error::operation_aborted, std::optional<T>());
    }

    std::optional<T> take_locked() {
      if (items.empty()) return std::nullopt;
      std::optional<T> item(std::move(items.front()));
      items.pop_front();
      return item;
    }

    // After a dequeue frees a slot, the oldest waiting producer's item is accepted.
    std::optional<typename detail::WaitList<T, SendSig>::Waiter> admit_waiting_sender_locked() {
      if (senders.empty()) return std::nullopt;
      auto s = senders.pop_front();
      items.push_back(std::move(s.payload));
      return std::optional(std::move(s));
    }

    template <class Sig, class H, class... Args>
    static void complete_now(H&& handler, Args&&... args) {
      // Never complete inline from the initiating function: post to the handler's executor.
      boost::asio::post(boost::asio::append(std::forward<H>(handler), std::forward<Args>(args)...));
    }

    mutable std::mutex mutex;
    const std::size_t capacity;
    std::deque<T> items;
    bool closed = false;
    detail::WaitList<T, SendSig> senders;
    detail::WaitList<std::monostate, RecvSig> receivers;
  };

  std::shared_ptr<State> state_;
};

}  // namespace vgen
