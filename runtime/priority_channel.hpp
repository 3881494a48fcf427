// PriorityChannel<T>: BoundedChannel's contract (runtime/channel.hpp) with another order: the
// item of highest priority first, the oldest first within a priority, and aging so that nothing
// waits forever.
//
// Order. Each item comes with a QueueTicket {priority, since}. Its rank is
//   since - priority * aging
// and the smallest rank goes first (ties: the order of arrival). So one priority level is worth
// `aging` of waiting: a waiting item's effective priority grows by one level per `aging`, and an
// item that has waited longer than (p_new - p_old) * aging is served before any newcomer of
// priority p_new. The rank never changes while an item waits, so the order is a plain sorted map.
// Producers waiting on a full channel are admitted by the same rank (not FIFO).
//
// Contract (as BoundedChannel)
//  - enqueue(v, ticket) waits while full (backpressure); an accepted item is delivered to exactly
//    one dequeue; close() never discards accepted items; enqueue on a closed channel fails with
//    channel_errc::closed (the item was not accepted). dequeue returns nullopt only once closed
//    and drained. try_enqueue / try_dequeue never wait.
//  - requeue(v, ticket): for an item a consumer took from this channel and gives back (e.g. a
//    job that gave way to higher-priority work). It never waits and is accepted even when the channel is full
//    or closed: the item already held a place, so the bound becomes capacity + consumers, and the
//    consumer that gives it back dequeues again, so a closed channel still drains it. A producer
//    waiting for room whose item ranks first is served before the accepted items.
//
// Thread-safety: every member may be called from any thread (one mutex; completions are posted
// after it is released). Cancellation: a waiting enqueue or dequeue is cancellable through its
// handler's slot and fails with operation_aborted without side effects.
// Lifetime: the channel must outlive the operations started on it.
#pragma once

#include "runtime/channel.hpp"  // channel_errc
#include "runtime/wait_list.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <variant>

namespace vgen {

struct QueueTicket {
  int priority = 0;                               // higher first
  std::chrono::steady_clock::time_point since{};  // when the item first queued: aging counts from it
};

// The default aging: one priority level per 5 s of waiting.
inline constexpr std::chrono::milliseconds kDefaultAging{5000};

// since - priority * aging (smaller is served first). `aging` must be positive.
std::chrono::steady_clock::time_point queue_rank(const QueueTicket& ticket, std::chrono::milliseconds aging);

template <class T>
class PriorityChannel {
  using error_code = boost::system::error_code;
  using SendSig = void(error_code);
  using RecvSig = void(error_code, std::optional<T>);

 public:
  explicit PriorityChannel(std::size_t capacity, std::chrono::milliseconds aging = kDefaultAging)
      : state_(std::make_shared<State>(capacity, aging)) {
    if (capacity == 0) throw std::invalid_argument("PriorityChannel capacity must be >= 1");
    if (aging.count() <= 0) throw std::invalid_argument("PriorityChannel aging must be positive");
  }
  PriorityChannel(const PriorityChannel&) = delete;
  PriorityChannel& operator=(const PriorityChannel&) = delete;

  // Waits while full. Completion: void(error_code): success, channel_errc::closed or
  // operation_aborted.
  template <class Token = boost::asio::use_awaitable_t<>>
  auto enqueue(T value, QueueTicket ticket, Token&& token = {}) {
    return boost::asio::async_initiate<Token, SendSig>(
        [st = state_](auto handler, T v, QueueTicket t) { st->start_send(std::move(handler), std::move(v), t); }, token,
        std::move(value), ticket);
  }

  // Waits while empty and open. Completion: void(error_code, optional<T>); nullopt: end of stream.
  template <class Token = boost::asio::use_awaitable_t<>>
  auto dequeue(Token&& token = {}) {
    return boost::asio::async_initiate<Token, RecvSig>([st = state_](auto handler) { st->start_receive(std::move(handler)); },
                                                       token);
  }

  // Never waits. Moves from `value` only when it was accepted.
  bool try_enqueue(T& value, QueueTicket ticket) { return state_->try_send(value, ticket); }
  // Never waits; always accepted (see the contract above).
  void requeue(T value, QueueTicket ticket) { state_->requeue(std::move(value), ticket); }
  std::optional<T> try_dequeue() { return state_->try_receive(); }

  void close() { state_->close(); }
  bool is_closed() const {
    std::lock_guard lock(state_->mutex);
    return state_->closed;
  }
  std::size_t size() const {
    std::lock_guard lock(state_->mutex);
    return state_->items.size();
  }
  std::size_t capacity() const noexcept { return state_->capacity; }
  std::chrono::milliseconds aging() const noexcept { return state_->aging; }
  std::size_t waiting_producers() const {
    std::lock_guard l(state_->mutex);
    return state_->senders.size();
  }
  std::size_t waiting_consumers() const {
    std::lock_guard l(state_->mutex);
    return state_->receivers.size();
  }
  // Items waiting (accepted, or offered by a producer waiting for room) whose priority is above
  // `priority`: who would displace work of that priority.
  std::size_t count_above(int priority) const {
    std::lock_guard l(state_->mutex);
    std::size_t n = 0;
    for (const auto& [key, item] : state_->items) n += item.priority > priority;
    for (const auto& [key, id] : state_->blocked) n += key.priority > priority;
    return n;
  }

 private:
  // The map key: rank, then arrival (FIFO among equal ranks); the priority rides along.
  struct Key {
    std::chrono::steady_clock::time_point rank;
    std::uint64_t seq = 0;
    int priority = 0;
    bool operator<(const Key& o) const { return rank != o.rank ? rank < o.rank : seq < o.seq; }
  };
  struct Item {
    T value;
    int priority = 0;
  };
  struct Offer {
    T value;
    Key key;
  };

  struct State : std::enable_shared_from_this<State> {
    State(std::size_t cap, std::chrono::milliseconds a) : capacity(cap), aging(a) {}

    Key key_for(const QueueTicket& t) { return Key{queue_rank(t, aging), ++seq, t.priority}; }

    template <class H>
    void start_send(H&& handler, T value, QueueTicket ticket) {
      std::unique_lock lock(mutex);
      if (closed) {
        lock.unlock();
        complete_now(std::forward<H>(handler), make_error_code(channel_errc::closed));
        return;
      }
      const auto key = key_for(ticket);
      if (!receivers.empty()) {  // a consumer waits: the buffer is empty, hand over directly
        auto r = receivers.pop_front();
        lock.unlock();
        std::move(r).complete(error_code{}, std::optional<T>(std::move(value)));
        complete_now(std::forward<H>(handler), error_code{});
        return;
      }
      if (items.size() < capacity) {
        items.emplace(key, Item{std::move(value), ticket.priority});
        lock.unlock();
        complete_now(std::forward<H>(handler), error_code{});
        return;
      }
      const auto id = senders.push(std::forward<H>(handler), Offer{std::move(value), key}, this->weak_from_this());
      blocked.emplace(key, id);
    }

    template <class H>
    void start_receive(H&& handler) {
      std::unique_lock lock(mutex);
      auto promoted = promote_locked();
      if (auto item = take_locked()) {
        auto released = items.size() < capacity ? admit_waiting_sender_locked() : std::nullopt;
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

    bool try_send(T& value, QueueTicket ticket) {
      std::unique_lock lock(mutex);
      if (closed) return false;
      if (!receivers.empty()) {
        auto r = receivers.pop_front();
        lock.unlock();
        std::move(r).complete(error_code{}, std::optional<T>(std::move(value)));
        return true;
      }
      if (items.size() >= capacity) return false;
      items.emplace(key_for(ticket), Item{std::move(value), ticket.priority});
      return true;
    }

    void requeue(T value, QueueTicket ticket) {
      std::unique_lock lock(mutex);
      if (!receivers.empty()) {
        auto r = receivers.pop_front();
        lock.unlock();
        std::move(r).complete(error_code{}, std::optional<T>(std::move(value)));
        return;
      }
      items.emplace(key_for(ticket), Item{std::move(value), ticket.priority});
    }

    std::optional<T> try_receive() {
      std::unique_lock lock(mutex);
      auto promoted = promote_locked();
      auto item = take_locked();
      auto released = item && items.size() < capacity ? admit_waiting_sender_locked() : std::nullopt;
      lock.unlock();
      if (promoted) std::move(*promoted).complete(error_code{});
      if (released) std::move(*released).complete(error_code{});
      return item;
    }

    // A waiting producer whose item ranks before every accepted one is accepted first, so that
    // it is the next served (the channel holds more than its capacity only after requeues).
    std::optional<typename detail::WaitList<Offer, SendSig>::Waiter> promote_locked() {
      if (blocked.empty() || (!items.empty() && !(blocked.begin()->first < items.begin()->first))) return std::nullopt;
      return admit_waiting_sender_locked();
    }

    void close() {
      std::unique_lock lock(mutex);
      if (closed) return;
      closed = true;
      auto refused = senders.take_all();  // their items were never accepted
      blocked.clear();
      auto idle = receivers.take_all();  // non-empty only when the buffer is empty
      lock.unlock();
      for (auto& s : refused) std::move(s).complete(make_error_code(channel_errc::closed));
      for (auto& r : idle) std::move(r).complete(error_code{}, std::optional<T>());
    }

    // Called from a cancellation slot.
    void cancel(std::uint64_t id) {
      std::unique_lock lock(mutex);
      auto s = senders.remove(id);
      if (s) blocked.erase(s->payload.key);
      auto r = s ? std::nullopt : receivers.remove(id);
      lock.unlock();
      if (s) std::move(*s).complete(boost::asio::error::operation_aborted);
      if (r) std::move(*r).complete(boost::asio::error::operation_aborted, std::optional<T>());
    }

    std::optional<T> take_locked() {
      if (items.empty()) return std::nullopt;
      auto node = items.extract(items.begin());
      return std::optional<T>(std::move(node.mapped().value));
    }

    // After a dequeue frees a slot, the best-ranked waiting producer's item is accepted.
    std::optional<typename detail::WaitList<Offer, SendSig>::Waiter> admit_waiting_sender_locked() {
      if (blocked.empty()) return std::nullopt;
      const auto id = blocked.begin()->second;
      blocked.erase(blocked.begin());
      auto s = senders.remove(id);
      if (!s) return std::nullopt;
      items.emplace(s->payload.key, Item{std::move(s->payload.value), s->payload.key.priority});
      return s;
    }

    template <class H, class... Args>
    static void complete_now(H&& handler, Args&&... args) {
      // Never complete inline from the initiating function: post to the handler's executor.
      boost::asio::post(boost::asio::append(std::forward<H>(handler), std::forward<Args>(args)...));
    }

    mutable std::mutex mutex;
    const std::size_t capacity;
    const std::chrono::milliseconds aging;
    std::map<Key, Item> items;
    std::map<Key, std::uint64_t> blocked;  // waiting producers by their item's rank -> waiter id
    std::uint64_t seq = 0;
    bool closed = false;
    detail::WaitList<Offer, SendSig> senders;
    detail::WaitList<std::monostate, RecvSig> receivers;
  };

  std::shared_ptr<State> state_;
};

}  // namespace vgen
