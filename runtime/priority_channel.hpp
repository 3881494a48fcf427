// PriorityChannel<T>: BasicChannel (runtime/channel.hpp) with PriorityOrder: BoundedChannel's
// contract and waiting/close/cancel logic, with another order: the item of highest priority first, the oldest first within a priority, and aging so that nothing
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

#include "runtime/channel.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <utility>

namespace vgen {

struct QueueTicket {
  int priority = 0;                               // higher first
  std::chrono::steady_clock::time_point since{};  // when the item first queued: aging counts from it
};

// The default aging: one priority level per 5 s of waiting.
inline constexpr std::chrono::milliseconds kDefaultAging{5000};

// since - priority * aging (smaller is served first). `aging` must be positive.
std::chrono::steady_clock::time_point queue_rank(const QueueTicket& ticket, std::chrono::milliseconds aging);

// Rank order with aging (above): accepted items and waiting producers both by rank.
template <class T>
class PriorityOrder {
 public:
  using Ticket = QueueTicket;
  // Rank, then arrival (FIFO among equal ranks); the priority rides along.
  struct Key {
    std::chrono::steady_clock::time_point rank;
    std::uint64_t seq = 0;
    int priority = 0;
    bool operator<(const Key& o) const { return rank != o.rank ? rank < o.rank : seq < o.seq; }
  };
  static constexpr const char* kName = "PriorityChannel";
  static constexpr bool kRequeue = true;

  explicit PriorityOrder(std::chrono::milliseconds aging = kDefaultAging) : aging_(aging) {
    if (aging.count() <= 0) throw std::invalid_argument("PriorityChannel aging must be positive");
  }

  Key key_for(const Ticket& t) { return Key{queue_rank(t, aging_), ++seq_, t.priority}; }
  void push(T value, const Key& key) { items_.emplace(key, std::move(value)); }
  std::optional<T> take() {
    if (items_.empty()) return std::nullopt;
    auto node = items_.extract(items_.begin());
    return std::optional<T>(std::move(node.mapped()));
  }
  std::size_t size() const noexcept { return items_.size(); }

  void block(const Key& key, std::uint64_t id) { blocked_.emplace(key, id); }
  void unblock(const Key& key, std::uint64_t) { blocked_.erase(key); }
  std::optional<std::uint64_t> pop_blocked() {
    if (blocked_.empty()) return std::nullopt;
    const auto id = blocked_.begin()->second;
    blocked_.erase(blocked_.begin());
    return id;
  }
  void clear_blocked() { blocked_.clear(); }
  // A waiting producer ranks before every accepted item (possible only after a requeue filled
  // the channel past its capacity, or when nothing is accepted at all).
  bool promote_first() const { return !blocked_.empty() && (items_.empty() || blocked_.begin()->first < items_.begin()->first); }

  std::chrono::milliseconds aging() const noexcept { return aging_; }
  std::size_t count_above(int priority) const {
    std::size_t n = 0;
    for (const auto& [key, item] : items_) n += key.priority > priority;
    for (const auto& [key, id] : blocked_) n += key.priority > priority;
    return n;
  }

 private:
  std::chrono::milliseconds aging_;
  std::map<Key, T> items_;
  std::map<Key, std::uint64_t> blocked_;  // waiting producers by their item's rank -> waiter id
  std::uint64_t seq_ = 0;
};

template <class T>
class PriorityChannel : public BasicChannel<T, PriorityOrder<T>> {
  using Base = BasicChannel<T, PriorityOrder<T>>;

 public:
  explicit PriorityChannel(std::size_t capacity, std::chrono::milliseconds aging = kDefaultAging) : Base(capacity, aging) {}

  std::chrono::milliseconds aging() const {
    return this->with_order([](const PriorityOrder<T>& o) { return o.aging(); });
  }
  // Items waiting (accepted, or offered by a producer waiting for room) whose priority is above
  // `priority`: who would displace work of that priority.
  std::size_t count_above(int priority) const {
    return this->with_order([priority](const PriorityOrder<T>& o) { return o.count_above(priority); });
  }
};

}  // namespace vgen
