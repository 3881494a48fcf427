#include "runtime/ttl_cache.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using vgen::CacheStats;
using vgen::ContentKey;
using vgen::TtlCache;
using vgen::TtlCacheOptions;
using Clock = std::chrono::steady_clock;

namespace {

// A virtual clock: time moves only when the test says so.
struct ManualClock {
  std::shared_ptr<Clock::time_point> now =
      std::make_shared<Clock::time_point>(Clock::time_point{} + 1h);

  std::function<Clock::time_point()> fn() const {
    return [now = now] { return *now; };
  }
  void advance(Clock::duration d) const { *now += d; }
};

ContentKey key(int i) { return vgen::content_key_bytes("key-" + std::to_string(i)); }

TtlCacheOptions options(const ManualClock& clock, std::size_t max_entries = 1024,
                        std::size_t max_cost = SIZE_MAX, Clock::duration ttl = 10min) {
  TtlCacheOptions o;
  o.max_entries = max_entries;
  o.max_cost = max_cost;
  o.default_ttl = ttl;
  o.clock = clock.fn();
  return o;
}

}  // namespace

TEST_CASE("hits and misses are counted") {
  ManualClock clock;
  TtlCache<int> cache(options(clock));
  CHECK(cache.stats().hit_rate() == 0.0);
  CHECK_FALSE(cache.get(key(1)).has_value());
  cache.put(key(1), 10);
  CHECK(cache.get(key(1)) == 10);
  CHECK(cache.get(key(1)) == 10);
  CHECK_FALSE(cache.get(key(2)).has_value());

  const CacheStats s = cache.stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 2);
  CHECK(s.insertions == 1);
  CHECK(s.evictions == 0);
  CHECK(s.expirations == 0);
  CHECK(s.entries == 1);
  CHECK(s.cost == 1);
  CHECK(s.hit_rate() == doctest::Approx(0.5));
}

TEST_CASE("an entry expires exactly at inserted + ttl") {
  ManualClock clock;
  TtlCache<std::string> cache(options(clock, 16, SIZE_MAX, 10s));
  cache.put(key(1), "one");
  clock.advance(10s - 1ns);
  CHECK(cache.get(key(1)) == "one");  // a hit does not extend the ttl
  clock.advance(1ns);                 // now == inserted + ttl: expired
  CHECK_FALSE(cache.get(key(1)).has_value());
  CHECK(cache.size() == 0);  // removed on the expired get

  const CacheStats s = cache.stats();
  CHECK(s.hits == 1);
  CHECK(s.misses == 1);
  CHECK(s.expirations == 1);
  CHECK(s.evictions == 0);
  CHECK(s.cost == 0);
}

TEST_CASE("put restarts the ttl of a replaced entry") {
  ManualClock clock;
  TtlCache<int> cache(options(clock, 16, SIZE_MAX, 10s));
  cache.put(key(1), 1);
  clock.advance(8s);
  cache.put(key(1), 2);
  clock.advance(8s);
  CHECK(cache.get(key(1)) == 2);
  clock.advance(2s);
  CHECK_FALSE(cache.get(key(1)).has_value());
}

TEST_CASE("a per-entry ttl overrides the default") {
  ManualClock clock;
  TtlCache<int> cache(options(clock, 16, SIZE_MAX, 10s));
  cache.put(key(1), 1, 1, 2s);
  cache.put(key(2), 2, 1, 1h);
  cache.put(key(3), 3);
  clock.advance(2s);
  CHECK_FALSE(cache.get(key(1)).has_value());
  CHECK(cache.get(key(3)) == 3);
  clock.advance(8s);
  CHECK_FALSE(cache.get(key(3)).has_value());
  CHECK(cache.get(key(2)) == 2);
  clock.advance(1h - 10s - 1ns);
  CHECK(cache.get(key(2)) == 2);
  clock.advance(1ns);
  CHECK_FALSE(cache.get(key(2)).has_value());
  CHECK(cache.stats().expirations == 3);

  SUBCASE("a ttl of duration::max() never expires") {
    cache.put(key(4), 4, 1, Clock::duration::max());
    clock.advance(24h * 365 * 100);
    CHECK(cache.get(key(4)) == 4);
  }
  SUBCASE("a ttl <= 0 stores nothing and drops the old value") {
    cache.put(key(5), 5);
    cache.put(key(5), 6, 1, 0s);
    CHECK_FALSE(cache.get(key(5)).has_value());
    cache.put(key(5), 7, 1, -1s);
    CHECK(cache.size() == 0);
  }
}

TEST_CASE("LRU eviction follows get() refreshes") {
  ManualClock clock;
  TtlCache<int> cache(options(clock, 3));
  cache.put(key(1), 1);
  cache.put(key(2), 2);
  cache.put(key(3), 3);
  CHECK(cache.get(key(1)) == 1);  // order, most recent first: 1 3 2
  cache.put(key(4), 4);           // evicts 2
  CHECK(cache.size() == 3);
  CHECK_FALSE(cache.get(key(2)).has_value());
  CHECK(cache.get(key(3)) == 3);  // order: 3 4 1
  cache.put(key(5), 5);           // evicts 1
  CHECK_FALSE(cache.get(key(1)).has_value());
  CHECK(cache.get(key(3)) == 3);
  CHECK(cache.get(key(4)) == 4);
  CHECK(cache.get(key(5)) == 5);
  cache.put(key(3), 33);  // a replace refreshes too: order 3 5 4
  cache.put(key(6), 6);   // evicts 4
  CHECK_FALSE(cache.get(key(4)).has_value());
  CHECK(cache.get(key(3)) == 33);
  CHECK(cache.stats().evictions == 3);
  CHECK(cache.stats().expirations == 0);
}

TEST_CASE("cost bound evicts LRU entries until the new entry fits") {
  ManualClock clock;
  TtlCache<std::string> cache(options(clock, 100, 10));
  cache.put(key(1), "a", 4);
  cache.put(key(2), "b", 4);
  cache.put(key(3), "c", 2);
  CHECK(cache.stats().cost == 10);
  CHECK(cache.get(key(1)) == "a");  // order: 1 3 2
  cache.put(key(4), "d", 5);        // needs 5 free: evicts 2 (4), then 3 (2)
  CHECK(cache.stats().cost == 9);
  CHECK(cache.size() == 2);
  CHECK_FALSE(cache.get(key(2)).has_value());
  CHECK_FALSE(cache.get(key(3)).has_value());
  CHECK(cache.get(key(1)) == "a");
  CHECK(cache.get(key(4)) == "d");
  CHECK(cache.stats().evictions == 2);

  cache.put(key(5), "e", 10);  // exactly max_cost: fits alone
  CHECK(cache.size() == 1);
  CHECK(cache.stats().cost == 10);
  CHECK(cache.get(key(5)) == "e");
}

TEST_CASE("an entry whose cost alone exceeds max_cost is not stored") {
  ManualClock clock;
  TtlCache<int> cache(options(clock, 100, 10));
  cache.put(key(1), 1, 3);
  cache.put(key(2), 2, 11);
  CHECK_FALSE(cache.get(key(2)).has_value());
  CHECK(cache.get(key(1)) == 1);  // nothing was evicted to try to make room
  CHECK(cache.stats().insertions == 1);
  CHECK(cache.stats().evictions == 0);

  // Replacing with an oversized value drops the old value too.
  cache.put(key(1), 100, 11);
  CHECK_FALSE(cache.get(key(1)).has_value());
  CHECK(cache.stats().cost == 0);
}

TEST_CASE("max_entries == 0 stores nothing") {
  ManualClock clock;
  TtlCache<int> cache(options(clock, 0));
  cache.put(key(1), 1);
  CHECK(cache.size() == 0);
  CHECK_FALSE(cache.get(key(1)).has_value());
}

TEST_CASE("replace updates the cost") {
  ManualClock clock;
  TtlCache<int> cache(options(clock, 100, 10));
  cache.put(key(1), 1, 3);
  cache.put(key(2), 2, 3);
  cache.put(key(1), 11, 7);  // 3 + 7 == 10: fits without eviction
  CHECK(cache.stats().cost == 10);
  CHECK(cache.size() == 2);
  CHECK(cache.stats().evictions == 0);
  cache.put(key(1), 111, 8);  // 3 + 8 > 10: evicts 2, never the entry being replaced
  CHECK(cache.stats().cost == 8);
  CHECK(cache.stats().evictions == 1);
  CHECK(cache.get(key(1)) == 111);
  CHECK_FALSE(cache.get(key(2)).has_value());
  cache.put(key(1), 1, 1);
  CHECK(cache.stats().cost == 1);
  CHECK(cache.stats().insertions == 5);
}

TEST_CASE("purge_expired removes only expired entries") {
  ManualClock clock;
  TtlCache<int> cache(options(clock, 100, SIZE_MAX, 10s));
  for (int i = 0; i < 6; ++i) cache.put(key(i), i, 2, i % 2 == 0 ? 5s : 20s);
  CHECK(cache.purge_expired() == 0);
  clock.advance(5s);
  CHECK(cache.size() == 6);  // expiry is lazy
  CHECK(cache.purge_expired() == 3);
  CHECK(cache.size() == 3);
  CHECK(cache.stats().cost == 6);
  CHECK(cache.stats().expirations == 3);
  for (int i = 1; i < 6; i += 2) CHECK(cache.get(key(i)) == i);
  clock.advance(15s);
  CHECK(cache.purge_expired() == 3);
  CHECK(cache.size() == 0);
  CHECK(cache.stats().cost == 0);
}

TEST_CASE("an expired entry at the LRU end counts as an expiration when evicted") {
  ManualClock clock;
  TtlCache<int> cache(options(clock, 2));
  cache.put(key(1), 1, 1, 1s);
  cache.put(key(2), 2);
  clock.advance(1s);
  cache.put(key(3), 3);
  const CacheStats s = cache.stats();
  CHECK(s.expirations == 1);
  CHECK(s.evictions == 0);
  CHECK(s.entries == 2);
}

TEST_CASE("erase and clear") {
  ManualClock clock;
  TtlCache<int> cache(options(clock, 100, SIZE_MAX, 10s));
  cache.put(key(1), 1, 4);
  cache.put(key(2), 2, 5);
  CHECK(cache.erase(key(1)));
  CHECK_FALSE(cache.erase(key(1)));
  CHECK(cache.stats().cost == 5);
  clock.advance(10s);
  CHECK_FALSE(cache.erase(key(2)));  // expired: removed, reported absent
  CHECK(cache.size() == 0);
  CHECK(cache.stats().expirations == 1);

  cache.put(key(3), 3, 2);
  cache.put(key(4), 4, 2);
  CHECK(cache.get(key(3)) == 3);
  cache.clear();
  const CacheStats s = cache.stats();
  CHECK(s.entries == 0);
  CHECK(s.cost == 0);
  CHECK(s.hits == 1);  // counters survive clear()
  CHECK(s.insertions == 4);
  CHECK_FALSE(cache.get(key(3)).has_value());
}

TEST_CASE("other key types and shared values") {
  TtlCache<std::shared_ptr<const std::vector<float>>, std::string, std::hash<std::string>> cache;
  auto embedding = std::make_shared<const std::vector<float>>(768, 0.5f);
  cache.put("a cat", embedding, embedding->size() * sizeof(float));
  const auto got = cache.get("a cat");
  REQUIRE(got.has_value());
  CHECK(got->get() == embedding.get());  // the pointer is copied, not the vector
  CHECK(cache.stats().cost == 768 * sizeof(float));
}

TEST_CASE("concurrent get/put keeps the invariants" * doctest::timeout(60)) {
  constexpr int threads = 4;
  constexpr int keys = 64;
  constexpr int ops_per_thread = 20000;
  ManualClock clock;  // never advanced while the threads run
  TtlCache<int> cache(options(clock, 16));
  std::vector<ContentKey> key_of;
  for (int i = 0; i < keys; ++i) key_of.push_back(key(i));

  std::vector<std::uint64_t> gets(threads, 0);
  std::vector<std::uint64_t> puts(threads, 0);
  std::vector<std::uint64_t> wrong(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::minstd_rand rng(static_cast<unsigned>(t + 1));
      std::uniform_int_distribution<int> pick_key(0, keys - 1);
      std::uniform_int_distribution<int> pick_op(0, 2);
      for (int i = 0; i < ops_per_thread; ++i) {
        const int k = pick_key(rng);
        if (pick_op(rng) == 0) {
          cache.put(key_of[static_cast<std::size_t>(k)], k * 100 + t);
          ++puts[static_cast<std::size_t>(t)];
        } else {
          const auto v = cache.get(key_of[static_cast<std::size_t>(k)]);
          ++gets[static_cast<std::size_t>(t)];
          if (v && *v / 100 != k) ++wrong[static_cast<std::size_t>(t)];  // value of another key
        }
      }
    });
  }
  for (auto& thread : pool) thread.join();

  std::uint64_t total_gets = 0;
  std::uint64_t total_puts = 0;
  std::uint64_t total_wrong = 0;
  for (int t = 0; t < threads; ++t) {
    total_gets += gets[static_cast<std::size_t>(t)];
    total_puts += puts[static_cast<std::size_t>(t)];
    total_wrong += wrong[static_cast<std::size_t>(t)];
  }
  const CacheStats s = cache.stats();
  CHECK(cache.size() <= 16);
  CHECK(s.entries == cache.size());
  CHECK(s.cost == s.entries);  // every entry cost 1
  CHECK(s.hits + s.misses == total_gets);
  CHECK(s.insertions == total_puts);
  CHECK(s.expirations == 0);
  CHECK(s.hits > 0);
  CHECK(s.evictions > 0);
  CHECK(total_wrong == 0);
}

TEST_CASE("cache stats are published as Prometheus metrics") {
  vgen::MetricsRegistry metrics;
  vgen::CacheStats last;
  vgen::CacheStats now;
  now.hits = 3;
  now.misses = 1;
  now.entries = 2;
  vgen::publish_cache_stats(metrics, "text", now, last);
  now.hits = 5;
  vgen::publish_cache_stats(metrics, "text", now, last);
  const auto text = metrics.render_prometheus();
  CHECK(text.find("vgen_cache_hits_total{cache=\"text\"} 5") != std::string::npos);
  CHECK(text.find("vgen_cache_misses_total{cache=\"text\"} 1") != std::string::npos);
  CHECK(text.find("vgen_cache_entries{cache=\"text\"} 2") != std::string::npos);
  CHECK(text.find("vgen_cache_hit_ratio{cache=\"text\"} 0.8333333333333334") != std::string::npos);
}
