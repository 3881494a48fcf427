// TtlCache: a size-bounded LRU cache whose entries also expire after a time-to-live.
//
// Used for finished results and text embeddings, keyed by ContentKey. Two bounds hold after
// every put: at most `max_entries` entries, and the sum of entry costs (e.g. bytes) at most
// `max_cost`; put evicts least-recently-used entries until both hold.
//
// Expiry: an entry put at time t with ttl d is expired when now >= t + d (at the deadline it
// is already gone). An expired entry is never returned: get() and erase() remove it and count
// an expiration. Expired entries are otherwise removed lazily, so they still occupy size() and
// cost until touched, evicted or purge_expired() runs; an evicted entry that had already
// expired counts as an expiration, not an eviction. A ttl <= 0 stores nothing.
//
// Ownership: the cache owns its keys and values. get() returns a copy of the value, so store
// std::shared_ptr<const T> for big values. The clock is called without the lock held.
//
// Thread-safety: every member function may be called concurrently; one std::mutex per cache
// guards all state, values are copied in and out under it, and no user code other than the
// copy/move/destruction of Key and V (and Hash) runs under it. The clock function must be
// safe to call from several threads. Nothing blocks except on that mutex; there is no
// cancellation because nothing waits.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "runtime/content_key.hpp"
#include "runtime/metrics.hpp"

namespace vgen {

struct CacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;       // includes gets that found an expired entry
  std::uint64_t insertions = 0;   // puts that stored their value (replacements included)
  std::uint64_t evictions = 0;    // live entries removed to keep the size/cost bounds
  std::uint64_t expirations = 0;  // entries removed because their ttl had passed
  std::size_t entries = 0;        // entries held now, expired-but-not-yet-removed included
  std::size_t cost = 0;           // sum of their costs

  // hits / (hits + misses); 0 before the first get.
  double hit_rate() const;
};

// Publishes a cache's stats as Prometheus metrics labelled {cache="<name>"}:
// vgen_cache_{hits,misses,evictions,expirations}_total (counters, advanced by the change since
// `last`), vgen_cache_entries and vgen_cache_hit_ratio (gauges). `last` is updated to `now`.
// Call it from one thread per cache (e.g. when /metrics is scraped).
void publish_cache_stats(MetricsRegistry& metrics, std::string_view cache, const CacheStats& now, CacheStats& last);

struct TtlCacheOptions {
  using Clock = std::chrono::steady_clock;

  std::size_t max_entries = 1024;  // 0: nothing is stored
  std::size_t max_cost = SIZE_MAX;  // bound on the sum of entry costs
  Clock::duration default_ttl = std::chrono::minutes(10);
  std::function<Clock::time_point()> clock;  // empty => steady_clock::now; tests inject one
};

namespace detail {
// steady_clock::now, as the clock used when TtlCacheOptions::clock is empty.
std::chrono::steady_clock::time_point steady_now();
// now + ttl, saturating at time_point::max() (so a huge ttl means "never expires").
std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point now,
                                                     std::chrono::steady_clock::duration ttl);
}  // namespace detail

template <class V, class Key = ContentKey, class Hash = ContentKeyHash>
class TtlCache {
 public:
  using Clock = TtlCacheOptions::Clock;

  explicit TtlCache(TtlCacheOptions options = {}) : options_(std::move(options)) {
    if (!options_.clock) options_.clock = &detail::steady_now;
  }

  TtlCache(const TtlCache&) = delete;
  TtlCache& operator=(const TtlCache&) = delete;

  // A copy of the live value for `key`, refreshing its LRU position (not its ttl).
  // A missing or expired key is a miss; an expired entry is removed.
  std::optional<V> get(const Key& key) {
    const auto now = options_.clock();
    std::lock_guard lock(mutex_);
    const auto found = index_.find(key);
    if (found == index_.end()) {
      ++stats_.misses;
      return std::nullopt;
    }
    const auto entry = found->second;
    if (now >= entry->expires) {
      ++stats_.misses;
      ++stats_.expirations;
      remove_locked(found);
      return std::nullopt;
    }
    ++stats_.hits;
    lru_.splice(lru_.begin(), lru_, entry);
    return entry->value;
  }

  // Stores `value` under `key`, replacing any previous entry (its ttl restarts), then evicts
  // least-recently-used entries until both bounds hold. A value that cannot be stored (cost
  // above max_cost, max_entries == 0, ttl <= 0) is dropped, and so is the key's old entry:
  // after put, the key never maps to an older value.
  void put(const Key& key, V value, std::size_t cost = 1,
           std::optional<Clock::duration> ttl = std::nullopt) {
    const auto life = ttl.value_or(options_.default_ttl);
    const auto now = options_.clock();
    const bool storable = cost <= options_.max_cost && options_.max_entries > 0 &&
                          life > Clock::duration::zero();
    std::lock_guard lock(mutex_);
    const auto found = index_.find(key);
    if (!storable) {
      if (found != index_.end()) remove_locked(found);
      return;
    }
    const auto expires = detail::deadline_after(now, life);
    if (found != index_.end()) {
      // Reuse the node: move it to the front and take its old cost out before making room, so
      // eviction never picks it and the map keeps its iterator.
      const auto entry = found->second;
      lru_.splice(lru_.begin(), lru_, entry);
      cost_ -= entry->cost;
      entry->cost = 0;
      make_room_locked(now, 0, cost);
      try {
        entry->value = std::move(value);
      } catch (...) {
        remove_locked(found);
        throw;
      }
      entry->cost = cost;
      entry->expires = expires;
    } else {
      make_room_locked(now, 1, cost);
      lru_.push_front(Entry{key, std::move(value), cost, expires});
      try {
        index_.emplace(key, lru_.begin());
      } catch (...) {
        lru_.pop_front();
        throw;
      }
    }
    cost_ += cost;
    ++stats_.insertions;
  }

  // Removes `key`; true if a live entry was removed (an expired one is removed and counted as
  // an expiration, but reported as absent).
  bool erase(const Key& key) {
    const auto now = options_.clock();
    std::lock_guard lock(mutex_);
    const auto found = index_.find(key);
    if (found == index_.end()) return false;
    const bool live = now < found->second->expires;
    if (!live) ++stats_.expirations;
    remove_locked(found);
    return live;
  }

  // Removes every entry. Counters other than entries and cost are kept.
  void clear() {
    std::lock_guard lock(mutex_);
    index_.clear();
    lru_.clear();
    cost_ = 0;
  }

  // Removes every expired entry (O(size)); returns how many.
  std::size_t purge_expired() {
    const auto now = options_.clock();
    std::lock_guard lock(mutex_);
    std::size_t purged = 0;
    for (auto it = lru_.begin(); it != lru_.end();) {
      const auto next = std::next(it);
      if (now >= it->expires) {
        remove_locked(index_.find(it->key));
        ++purged;
      }
      it = next;
    }
    stats_.expirations += purged;
    return purged;
  }

  CacheStats stats() const {
    std::lock_guard lock(mutex_);
    CacheStats out = stats_;
    out.entries = index_.size();
    out.cost = cost_;
    return out;
  }

  // Entries held, expired-but-not-yet-removed included.
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return index_.size();
  }

 private:
  struct Entry {
    Key key;
    V value;
    std::size_t cost;
    Clock::time_point expires;
  };
  using List = std::list<Entry>;  // front = most recently used
  using Index = std::unordered_map<Key, typename List::iterator, Hash>;

  void remove_locked(typename Index::iterator found) {
    const auto entry = found->second;
    cost_ -= entry->cost;
    index_.erase(found);
    lru_.erase(entry);
  }

  // Evicts from the LRU end until `entries` more entries of total `cost` fit both bounds.
  // Written as a subtraction from max_cost (cost_ <= max_cost always holds) so that it cannot
  // overflow. Never empties past what is needed, and never touches the front entry while a put
  // is replacing it: that entry then counts 0 entries and 0 cost, so with it alone both
  // bounds hold (max_entries >= 1 and cost <= max_cost are checked by put).
  void make_room_locked(Clock::time_point now, std::size_t entries, std::size_t cost) {
    while (index_.size() + entries > options_.max_entries || cost > options_.max_cost - cost_) {
      const auto& victim = lru_.back();
      if (now >= victim.expires) {
        ++stats_.expirations;
      } else {
        ++stats_.evictions;
      }
      remove_locked(index_.find(victim.key));
    }
  }

  TtlCacheOptions options_;
  mutable std::mutex mutex_;
  List lru_;
  Index index_;
  std::size_t cost_ = 0;
  CacheStats stats_;
};

}  // namespace vgen
