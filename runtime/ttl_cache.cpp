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

}  // namespace vgen
