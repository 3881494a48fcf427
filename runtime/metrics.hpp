// Process metrics: counters, gauges and histograms, rendered in the Prometheus text
// exposition format 0.0.4.
//
// Ownership: a MetricsRegistry owns every metric it hands out. The references returned by
// counter() / gauge() / histogram() stay valid for the registry's lifetime (metrics live in
// stable heap storage and are never removed), so callers may cache them. The registry is
// neither copyable nor movable.
//
// Thread-safety: updating a metric (Counter::inc, Gauge::set/inc/dec, Histogram::observe)
// is lock-free (relaxed atomics) and safe from any thread, including coroutines on any
// executor. Registration and render_prometheus() take the registry's mutex; they block only
// for as long as another registration or rendering holds it, never on I/O. A rendering taken
// while updates run sees each value at some recent moment; a histogram's _count always
// equals its le="+Inf" bucket, but _sum may lag or lead its counts by in-flight observations.
// Nothing here awaits, so cancellation does not apply.
//
// Errors: invalid metric or label names, registering a name as a second type, or histogram
// buckets that are not strictly increasing throw vgen::Error(ErrorKind::invalid_argument).
// Counter::inc with a negative (or NaN) amount throws std::invalid_argument.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vgen {

// Label (name, value) pairs. The order a caller gives does not matter: the registry sorts
// them by name before looking a series up.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing value, e.g. jobs_completed_total.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds v (default 1). Throws std::invalid_argument if v is negative or NaN.
  void inc(double v = 1.0);
  double value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down, e.g. queue_depth.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void set(double v) noexcept { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1.0) noexcept { value_.fetch_add(v, std::memory_order_relaxed); }
  void dec(double v = 1.0) noexcept { value_.fetch_sub(v, std::memory_order_relaxed); }
  double value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Upper bounds in seconds, 1 ms .. 60 s, roughly exponential: suits job and stage latencies.
std::vector<double> default_latency_buckets();

// Counts observations into buckets with fixed upper bounds (an observation v falls into the
// first bucket whose bound is >= v, like Prometheus' `le`), plus a sum of all observations.
class Histogram {
 public:
  // Bounds must be finite-or-+Inf and strictly increasing; a trailing +Inf is dropped because
  // the +Inf bucket is always implicit. Throws vgen::Error(invalid_argument) otherwise.
  explicit Histogram(std::vector<double> bounds = default_latency_buckets());
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // NaN is counted in the +Inf bucket (and makes the sum NaN), as Prometheus clients do.
  void observe(double v) noexcept;

  std::uint64_t count() const noexcept;
  double sum() const noexcept { return sum_.load(std::memory_order_relaxed); }
  // Cumulative counts: one per upper bound, then one for +Inf (which equals count()).
  std::vector<std::uint64_t> bucket_counts() const;
  const std::vector<double>& bounds() const noexcept { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::atomic<std::uint64_t>> counts_;  // per bucket, not cumulative; never resized
  std::atomic<double> sum_{0.0};
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Returns the series `name{labels}`, creating it (and its family) on first use. The first
  // registration of a family fixes its help text; later help strings are ignored. A histogram
  // family's buckets are fixed by its first registration too: asking for the same family with
  // other buckets throws. Label names must be unique; histograms may not use the label `le`.
  Counter& counter(std::string_view name, std::string_view help, Labels labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, Labels labels = {});
  Histogram& histogram(std::string_view name, std::string_view help, Labels labels = {},
                       std::vector<double> buckets = default_latency_buckets());

  // Text exposition format 0.0.4: families in registration order, each with one # HELP and
  // one # TYPE line, its series sorted by their (sorted) labels.
  std::string render_prometheus() const;

 private:
  struct Family;
  enum class Kind { counter, gauge, histogram };

  // Finds or creates a family; callers hold mutex_. `buckets` matters only for histograms.
  Family& family_for(std::string_view name, std::string_view help, Kind kind,
                     const std::vector<double>& buckets);

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Family>> families_;  // registration order
  std::map<std::string, Family*, std::less<>> by_name_;
};

}  // namespace vgen
