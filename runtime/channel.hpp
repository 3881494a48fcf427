// BasicChannel<T, Order>: an awaitable multi-producer multi-consumer queue with a fixed capacity
// and explicit end-of-stream semantics; `Order` decides which accepted item goes out next and
// which waiting producer is admitted next. Two orders exist:
//   BoundedChannel<T>  = BasicChannel<T, FifoOrder<T>>      (here)
//   PriorityChannel<T> = BasicChannel<T, PriorityOrder<T>>  (runtime/priority_channel.hpp)
//
// Contract (every order)
//  - enqueue(v[, ticket]) waits while the channel is full (backpressure) and completes once v
//    is accepted. An accepted item is always delivered to exactly one dequeue; close() never
//    discards accepted items (unlike asio::experimental::concurrent_channel::close() in
//    Boost 1.81, which drops buffered items: see shared/STACK.md).
//  - enqueue on a closed channel fails with channel_errc::closed; the item was not accepted
//    and stays with the caller's exception (nothing is silently lost).
//  - dequeue() waits while the channel is empty and open; it returns std::nullopt only once
//    the channel is closed *and* drained: that is the end-of-stream marker.
//  - close() is idempotent. Producers still waiting on a full channel fail with `closed`.
//  - try_enqueue / try_dequeue never wait.
//  - Waiting consumers are served FIFO; an item offered while a consumer waits goes to it
//    directly. Items and waiting producers are served in the order's order (FIFO: arrival).
//
// The Order concept (see FifoOrder below): Ticket (what enqueue takes besides the item; empty
// for FIFO), Key (a ticket made comparable, kept with a waiting producer's item), key_for,
// push/take/size for accepted items, block/unblock/pop_blocked/clear_blocked for waiting
// producers, and promote_first(): whether the best waiting producer's item goes before every
// accepted one (only after a requeue can a full channel hold items ranked behind it).
// An order with `kRequeue` offers requeue(); one with a non-empty Ticket takes it in enqueue.
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
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
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

// Arrival order: items and waiting producers first in, first out.
template <class T>
class FifoOrder {
 public:
  struct Ticket {};
  struct Key {};
  static constexpr const char* kName = "BoundedChannel";
  static constexpr bool kRequeue = false;

  Key key_for(const Ticket&) { return {}; }
  void push(T value, const Key&) { items_.push_back(std::move(value)); }
  std::optional<T> take() {
    if (items_.empty()) return std::nullopt;
    std::optional<T> item(std::move(items_.front()));
    items_.pop_front();
    return item;
  }
  std::size_t size() const noexcept { return items_.size(); }

  void block(const Key&, std::uint64_t id) { blocked_.push_back(id); }
  void unblock(const Key&, std::uint64_t id) {
    if (auto it = std::find(blocked_.begin(), blocked_.end(), id); it != blocked_.end()) blocked_.erase(it);
  }
  std::optional<std::uint64_t> pop_blocked() {
    if (blocked_.empty()) return std::nullopt;
    const auto id = blocked_.front();
    blocked_.pop_front();
    return id;
  }
  void clear_blocked() { blocked_.clear(); }
  bool promote_first() const noexcept { return false; }  // no requeue: a waiting producer is never ahead

 private:
  std::deque<T> items_;
  std::deque<std::uint64_t> blocked_;  // waiting producers' ids, oldest first
};

template <class T, class Order>
class BasicChannel {
  using error_code = boost::system::error_code;
  using SendSig = void(error_code);
  using RecvSig = void(error_code, std::optional<T>);
  using Key = typename Order::Key;

 public:
  using Ticket = typename Order::Ticket;
  static constexpr bool kTicketless = std::is_empty_v<Ticket>;

  // `order_args` construct the Order (e.g. PriorityOrder's aging); it validates them.
  template <class... OrderArgs>
  explicit BasicChannel(std::size_t capacity, OrderArgs&&... order_args)
      : state_(std::make_shared<State>(capacity, std::forward<OrderArgs>(order_args)...)) {
    if (capacity == 0) throw std::invalid_argument(std::string(Order::kName) + " capacity must be >= 1");
  }
  BasicChannel(const BasicChannel&) = delete;
  BasicChannel& operator=(const BasicChannel&) = delete;

  // Waits while full. Completion: void(error_code): success, channel_errc::closed or
  // operation_aborted. With use_awaitable a failure throws boost::system::system_error.
  template <class Token = boost::asio::use_awaitable_t<>>
  auto enqueue(T value, Ticket ticket, Token&& token = {}) {
    return boost::asio::async_initiate<Token, SendSig>(
        [st = state_](auto handler, T v, Ticket t) { st->start_send(std::move(handler), std::move(v), t); }, token,
        std::move(value), ticket);
  }
  template <class Token = boost::asio::use_awaitable_t<>>
    requires kTicketless
  auto enqueue(T value, Token&& token = {}) {
    return enqueue(std::move(value), Ticket{}, std::forward<Token>(token));
  }

  // Waits while empty and open. Completion: void(error_code, optional<T>); nullopt means
  // closed and drained (end of stream).
  template <class Token = boost::asio::use_awaitable_t<>>
  auto dequeue(Token&& token = {}) {
    return boost::asio::async_initiate<Token, RecvSig>(
        [st = state_](auto handler) { st->start_receive(std::move(handler)); }, token);
  }

  // Never waits. Moves from `value` only when it was accepted.
  bool try_enqueue(T& value, Ticket ticket) { return state_->try_send(value, ticket); }
  bool try_enqueue(T& value) requires kTicketless { return state_->try_send(value, Ticket{}); }
  bool try_enqueue(T&& value) requires kTicketless { return state_->try_send(value, Ticket{}); }
  std::optional<T> try_dequeue() { return state_->try_receive(); }

  // For an item a consumer took from this channel and gives back (e.g. a job a stage
  // sends back to its own queue). Never waits and is accepted even when the channel is full or closed: the item
  // already held a place, so the bound becomes capacity + consumers, and the consumer that gives
  // it back dequeues again, so a closed channel still drains it.
  void requeue(T value, Ticket ticket) requires Order::kRequeue { state_->requeue(std::move(value), ticket); }

  void close() { state_->close(); }
  bool is_closed() const { std::lock_guard lock(state_->mutex); return state_->closed; }
  // Items buffered and accepted but not yet dequeued.
  std::size_t size() const { std::lock_guard lock(state_->mutex); return state_->order.size(); }
  std::size_t capacity() const noexcept { return state_->capacity; }
  std::size_t waiting_producers() const { std::lock_guard l(state_->mutex); return state_->senders.size(); }
  std::size_t waiting_consumers() const { std::lock_guard l(state_->mutex); return state_->receivers.size(); }


 protected:
  // The order itself, under the channel's lock, for the queries an order adds (count_above).
  template <class F>
  auto with_order(F&& f) const {
    std::lock_guard l(state_->mutex);
    return std::forward<F>(f)(std::as_const(state_->order));
  }

 private:
  struct Offer {
    T value;
    Key key;
  };
  using Senders = detail::WaitList<Offer, SendSig>;

  struct State : std::enable_shared_from_this<State> {
    template <class... OrderArgs>
    explicit State(std::size_t cap, OrderArgs&&... args) : capacity(cap), order(std::forward<OrderArgs>(args)...) {}

    template <class H>
    void start_send(H&& handler, T value, const Ticket& ticket) {
      std::unique_lock lock(mutex);
      if (closed) {
        lock.unlock();
        complete_now(std::forward<H>(handler), make_error_code(channel_errc::closed));
        return;
      }
      const auto key = order.key_for(ticket);
      if (!receivers.empty()) {  // a consumer waits: the buffer is empty, hand over directly
        auto r = receivers.pop_front();
        lock.unlock();
        std::move(r).complete(error_code{}, std::optional<T>(std::move(value)));
        complete_now(std::forward<H>(handler), error_code{});
        return;
      }
      if (order.size() < capacity) {
        order.push(std::move(value), key);
        lock.unlock();
        complete_now(std::forward<H>(handler), error_code{});
        return;
      }
      const auto id = senders.push(std::forward<H>(handler), Offer{std::move(value), key}, this->weak_from_this());
      order.block(key, id);
    }

    template <class H>
    void start_receive(H&& handler) {
      std::unique_lock lock(mutex);
      auto promoted = promote_locked();
      if (auto item = order.take()) {
        auto released = order.size() < capacity ? admit_waiting_sender_locked() : std::nullopt;
        lock.unlock();
        if (promoted) std::move(*promoted).complete(error_code{});
        if (released) std::move(*released).complete(error_code{});
        complete_now(std::forward<H>(handler), error_code{}, std::move(item));
        return;
      }
      if (closed) {
        lock.unlock();
        complete_now(std::forward<H>(handler), error_code{}, std::optional<T>());
        return;
      }
      receivers.push(std::forward<H>(handler), std::monostate{}, this->weak_from_this());
    }

    bool try_send(T& value, const Ticket& ticket) {
      std::unique_lock lock(mutex);
      if (closed) return false;
      if (!receivers.empty()) {
        auto r = receivers.pop_front();
        lock.unlock();
        std::move(r).complete(error_code{}, std::optional<T>(std::move(value)));
        return true;
      }
      if (order.size() >= capacity) return false;
      order.push(std::move(value), order.key_for(ticket));
      return true;
    }

    void requeue(T value, const Ticket& ticket) {
      std::unique_lock lock(mutex);
      if (!receivers.empty()) {
        auto r = receivers.pop_front();
        lock.unlock();
        std::move(r).complete(error_code{}, std::optional<T>(std::move(value)));
        return;
      }
      order.push(std::move(value), order.key_for(ticket));
    }

    std::optional<T> try_receive() {
      std::unique_lock lock(mutex);
      auto promoted = promote_locked();
      auto item = order.take();
      auto released = item && order.size() < capacity ? admit_waiting_sender_locked() : std::nullopt;
      lock.unlock();
      if (promoted) std::move(*promoted).complete(error_code{});
      if (released) std::move(*released).complete(error_code{});
      return item;
    }

    void close() {
      std::unique_lock lock(mutex);
      if (closed) return;
      closed = true;
      auto refused = senders.take_all();  // their items were never accepted
      order.clear_blocked();
      auto idle = receivers.take_all();  // non-empty only when the buffer is empty
      lock.unlock();
      for (auto& s : refused) std::move(s).complete(make_error_code(channel_errc::closed));
      for (auto& r : idle) std::move(r).complete(error_code{}, std::optional<T>());
    }

    // Called from a cancellation slot.
    void cancel(std::uint64_t id) {
      std::unique_lock lock(mutex);
      auto s = senders.remove(id);
      if (s) order.unblock(s->payload.key, id);
      auto r = s ? std::nullopt : receivers.remove(id);
      lock.unlock();
      if (s) std::move(*s).complete(boost::asio::error::operation_aborted);
      if (r) std::move(*r).complete(boost::asio::error::operation_aborted, std::optional<T>());
    }

    // A waiting producer whose item ranks before every accepted one is accepted first, so that
    // it is the next served (the channel holds more than its capacity only after requeues).
    std::optional<typename Senders::Waiter> promote_locked() {
      if (!order.promote_first()) return std::nullopt;
      return admit_waiting_sender_locked();
    }

    // After a dequeue frees a slot, the waiting producer the order names first is accepted.
    std::optional<typename Senders::Waiter> admit_waiting_sender_locked() {
      const auto id = order.pop_blocked();
      if (!id) return std::nullopt;
      auto s = senders.remove(*id);
      if (!s) return std::nullopt;
      order.push(std::move(s->payload.value), s->payload.key);
      return s;
    }

    template <class H, class... Args>
    static void complete_now(H&& handler, Args&&... args) {
      // Never complete inline from the initiating function: post to the handler's executor.
      boost::asio::post(boost::asio::append(std::forward<H>(handler), std::forward<Args>(args)...));
    }

    mutable std::mutex mutex;
    const std::size_t capacity;
    Order order;
    bool closed = false;
    Senders senders;
    detail::WaitList<std::monostate, RecvSig> receivers;
  };

  std::shared_ptr<State> state_;
};

template <class T>
using BoundedChannel = BasicChannel<T, FifoOrder<T>>;

}  // namespace vgen
