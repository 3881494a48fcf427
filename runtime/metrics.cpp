#include "runtime/metrics.hpp"

#include "runtime/errors.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <system_error>

namespace vgen {

namespace {

bool is_name_start(char c, bool colon_ok) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
}

bool is_name_char(char c, bool colon_ok) {
  return is_name_start(c, colon_ok) || (c >= '0' && c <= '9');
}

// Metric names may contain ':' (reserved for recording rules), label names may not.
bool is_valid_name(std::string_view name, bool colon_ok) {
  if (name.empty() || !is_name_start(name.front(), colon_ok)) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return is_name_char(c, colon_ok); });
}

void check_metric_name(std::string_view name) {
  if (!is_valid_name(name, true)) {
    throw_error(ErrorKind::invalid_argument,
                "invalid metric name '" + std::string(name) +
                    "': must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
}

// Sorts by label name so that identity does not depend on the caller's order, then checks
// the names: the error names both the metric and the offending label.
void normalise_labels(std::string_view metric, Labels& labels, bool is_histogram) {
  std::stable_sort(labels.begin(), labels.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const std::string& key = labels[i].first;
    std::string problem;
    if (!is_valid_name(key, false)) {
      problem = "must match [a-zA-Z_][a-zA-Z0-9_]*";
    } else if (i > 0 && labels[i - 1].first == key) {
      problem = "given more than once";
    } else if (is_histogram && key == "le") {
      problem = "'le' is reserved for histogram buckets";
    }
    if (!problem.empty()) {
      throw_error(ErrorKind::invalid_argument, "invalid label name '" + key + "' on metric '" +
                                                   std::string(metric) + "': " + problem);
    }
  }
}

// The +Inf bucket is implicit, so a trailing +Inf bound is redundant and dropped.
std::vector<double> normalise_bounds(std::vector<double> bounds) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (!bounds.empty() && bounds.back() == inf) bounds.pop_back();
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    const bool finite = std::isfinite(bounds[i]);
    if (!finite || (i > 0 && !(bounds[i - 1] < bounds[i]))) {
      throw_error(ErrorKind::invalid_argument,
                  finite ? "histogram buckets must be strictly increasing"
                         : "histogram buckets must be finite (+Inf is implicit)");
    }
  }
  return bounds;
}

// Integers print without an exponent or fraction ("3", "1000000"); everything else prints
// as the shortest text that round-trips. Special values use Prometheus' spelling.
void append_value(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  if (v == 0) v = 0;  // -0 prints as 0
  char buf[64];
  const bool integral = std::trunc(v) == v && std::fabs(v) < 1e15;
  const auto res = integral ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                            : std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

void append_escaped(std::string& out, std::string_view text, bool escape_quote) {
  for (char c : text) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '"':
        out += escape_quote ? "\\\"" : "\"";
        break;
      default: out += c;
    }
  }
}

// `{a="x",b="y"}`, with le="..." appended last when given; nothing when there are no labels.
void append_labels(std::string& out, const Labels& labels, const std::string* le = nullptr) {
  if (labels.empty() && le == nullptr) return;
  out += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += key;
    out += "=\"";
    append_escaped(out, value, true);
    out += '"';
  }
  if (le != nullptr) {
    if (!first) out += ',';
    out += "le=\"";
    out += *le;
    out += '"';
  }
  out += '}';
}

void append_value(std::string& out, std::uint64_t v) {
  char buf[24];
  out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

template <class Value>
void append_sample(std::string& out, std::string_view name, const Labels& labels, Value v,
                   const std::string* le = nullptr) {
  out += name;
  append_labels(out, labels, le);
  out += ' ';
  append_value(out, v);
  out += '\n';
}

}  // namespace

void Counter::inc(double v) {
  if (!(v >= 0)) throw std::invalid_argument("Counter::inc: amount must be >= 0");
  value_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<double> default_latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(normalise_bounds(std::move(bounds))), counts_(bounds_.size() + 1) {}

void Histogram::observe(double v) noexcept {
  // lower_bound finds the first bound >= v (Prometheus' le is inclusive); NaN compares false
  // with every bound, so it is sent to +Inf explicitly.
  const std::size_t i =
      std::isnan(v) ? bounds_.size()
                    : static_cast<std::size_t>(
                          std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::uint64_t Histogram::count() const noexcept {
  std::uint64_t total = 0;
  for (const auto& c : counts_) total += c.load(std::memory_order_relaxed);
  return total;
}

std::vector<std::uint64_t> Histogram::bucket_counts() const {
  std::vector<std::uint64_t> cumulative;
  cumulative.reserve(counts_.size());
  std::uint64_t running = 0;
  for (const auto& c : counts_) {
    running += c.load(std::memory_order_relaxed);
    cumulative.push_back(running);
  }
  return cumulative;
}

struct MetricsRegistry::Family {
  std::string name;
  std::string help;
  Kind kind;
  std::vector<double> buckets;  // histograms only, normalised
  // Keyed by sorted labels, so iteration order is the deterministic rendering order.
  std::map<Labels, std::unique_ptr<Counter>> counters;
  std::map<Labels, std::unique_ptr<Gauge>> gauges;
  std::map<Labels, std::unique_ptr<Histogram>> histograms;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

namespace {

// Indexed by MetricsRegistry::Kind (private, hence the integer).
std::string_view kind_name(int kind) {
  static constexpr std::string_view names[] = {"counter", "gauge", "histogram"};
  return names[kind];
}

template <class Metric, class... Args>
Metric& find_or_add(std::map<Labels, std::unique_ptr<Metric>>& series, Labels labels,
                    Args&&... args) {
  auto [it, inserted] = series.try_emplace(std::move(labels));
  if (inserted) {
    try {
      it->second = std::make_unique<Metric>(std::forward<Args>(args)...);
    } catch (...) {
      series.erase(it);
      throw;
    }
  }
  return *it->second;
}

}  // namespace

MetricsRegistry::Family& MetricsRegistry::family_for(std::string_view name, std::string_view help,
                                                     Kind kind,
                                                     const std::vector<double>& buckets) {
  if (auto it = by_name_.find(name); it != by_name_.end()) {
    Family& family = *it->second;
    if (family.kind != kind) {
      throw_error(ErrorKind::invalid_argument,
                  "metric '" + family.name + "' is already registered as a " +
                      std::string(kind_name(static_cast<int>(family.kind))) + ", not a " +
                      std::string(kind_name(static_cast<int>(kind))));
    }
    if (kind == Kind::histogram && family.buckets != buckets) {
      throw_error(ErrorKind::invalid_argument,
                  "histogram '" + family.name + "' is already registered with other buckets");
    }
    return family;
  }
  check_metric_name(name);
  auto family = std::make_unique<Family>();
  family->name = std::string(name);
  family->help = std::string(help);
  family->kind = kind;
  family->buckets = buckets;
  Family& ref = *family;
  families_.push_back(std::move(family));
  try {
    by_name_.emplace(ref.name, &ref);
  } catch (...) {
    families_.pop_back();
    throw;
  }
  return ref;
}

Counter& MetricsRegistry::counter(std::string_view name, std::string_view help, Labels labels) {
  normalise_labels(name, labels, false);
  std::lock_guard lock(mutex_);
  return find_or_add(family_for(name, help, Kind::counter, {}).counters, std::move(labels));
}

Gauge& MetricsRegistry::gauge(std::string_view name, std::string_view help, Labels labels) {
  normalise_labels(name, labels, false);
  std::lock_guard lock(mutex_);
  return find_or_add(family_for(name, help, Kind::gauge, {}).gauges, std::move(labels));
}

Histogram& MetricsRegistry::histogram(std::string_view name, std::string_view help,
                                      Labels labels, std::vector<double> buckets) {
  normalise_labels(name, labels, true);
  buckets = normalise_bounds(std::move(buckets));
  std::lock_guard lock(mutex_);
  Family& family = family_for(name, help, Kind::histogram, buckets);
  return find_or_add(family.histograms, std::move(labels), std::move(buckets));
}

std::string MetricsRegistry::render_prometheus() const {
  std::string out;
  std::lock_guard lock(mutex_);
  for (const auto& family : families_) {
    out += "# HELP ";
    out += family->name;
    out += ' ';
    append_escaped(out, family->help, false);
    out += "\n# TYPE ";
    out += family->name;
    out += ' ';
    out += kind_name(static_cast<int>(family->kind));
    out += '\n';
    for (const auto& [labels, c] : family->counters) {
      append_sample(out, family->name, labels, c->value());
    }
    for (const auto& [labels, g] : family->gauges) {
      append_sample(out, family->name, labels, g->value());
    }
    for (const auto& [labels, h] : family->histograms) {
      // One snapshot of the counts keeps the buckets cumulative and _count == le="+Inf".
      const std::vector<std::uint64_t> counts = h->bucket_counts();
      const std::string bucket_name = family->name + "_bucket";
      std::string le;
      for (std::size_t i = 0; i < counts.size(); ++i) {
        le.clear();
        if (i < h->bounds().size()) {
          append_value(le, h->bounds()[i]);
        } else {
          le = "+Inf";
        }
        append_sample(out, bucket_name, labels, counts[i], &le);
      }
      append_sample(out, family->name + "_sum", labels, h->sum());
      append_sample(out, family->name + "_count", labels, counts.back());
    }
  }
  return out;
}

}  // namespace vgen
