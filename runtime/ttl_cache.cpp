#include "runtime/ttl_cache.hpp"

namespace vgen {

double CacheStats::hit_rate() const {
  const std::uint64_t lookups = hits + misses;
  return lookups == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(lookups);
}

namespace detail {

std::chrono::steady_clock::time_point steady_now() { return std::chrono::steady_clock::now(); }

std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point now,
                                                     std::chrono::steady_clock::duration ttl) {
  // time_point + duration overflows (UB on the signed rep) for ttl near duration::max(), the
  // natural way to ask for "no expiry"; saturate instead. put() only passes ttl > 0, and for
  // those max() - ttl cannot overflow, whatever the sign of `now`.
  using time_point = std::chrono::steady_clock::time_point;
  if (ttl > ttl.zero() && now > time_point::max() - ttl) return time_point::max();
  return now + ttl;
}

}  // namespace detail

void publish_cache_stats(MetricsRegistry& metrics, std::string_view cache, const CacheStats& now, CacheStats& last) {
  const Labels l{{"cache", std::string(cache)}};
  auto advance = [&](const char* name, const char* help, std::uint64_t cur, std::uint64_t prev) {
    auto& c = metrics.counter(name, help, l);
    if (cur > prev) c.inc(static_cast<double>(cur - prev));
  };
  advance("vgen_cache_hits_total", "Cache lookups that found a live entry", now.hits, last.hits);
  advance("vgen_cache_misses_total", "Cache lookups that found nothing live", now.misses, last.misses);
  advance("vgen_cache_evictions_total", "Live entries evicted to keep the bounds", now.evictions, last.evictions);
  advance("vgen_cache_expirations_total", "Entries removed because their TTL passed", now.expirations, last.expirations);
  metrics.gauge("vgen_cache_entries", "Entries held", l).set(static_cast<double>(now.entries));
  metrics.gauge("vgen_cache_hit_ratio", "hits / (hits + misses)", l).set(now.hit_rate());
  last = now;
}

}  // namespace vgen
