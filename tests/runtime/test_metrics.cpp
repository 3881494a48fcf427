#include "runtime/metrics.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using vgen::Error;
using vgen::ErrorKind;
using vgen::Labels;
using vgen::MetricsRegistry;

// Runs f, expecting vgen::Error(invalid_argument) whose message mentions `mentions`.
template <class F>
void check_invalid(F&& f, const std::string& mentions) {
  try {
    f();
    FAIL("expected vgen::Error mentioning '" << mentions << "'");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK_MESSAGE(std::string(e.what()).find(mentions) != std::string::npos, e.what());
  }
}

std::string render_gauge(double v) {
  MetricsRegistry r;
  r.gauge("g", "h").set(v);
  return r.render_prometheus();
}

}  // namespace

TEST_CASE("counter counts up and rejects negative amounts") {
  vgen::Counter c;
  CHECK(c.value() == 0);
  c.inc();
  c.inc(2.5);
  CHECK(c.value() == 3.5);
  CHECK_THROWS_AS(c.inc(-1), std::invalid_argument);
  CHECK_THROWS_AS(c.inc(std::numeric_limits<double>::quiet_NaN()), std::invalid_argument);
  CHECK(c.value() == 3.5);
}

TEST_CASE("gauge sets, increments and decrements") {
  vgen::Gauge g;
  g.set(10);
  g.inc();
  g.inc(4);
  g.dec(2.5);
  g.dec();
  CHECK(g.value() == 11.5);
  g.set(-3);
  CHECK(g.value() == -3);
}

TEST_CASE("histogram counts into cumulative buckets") {
  vgen::Histogram h({1, 2, 5});
  CHECK(h.bounds() == std::vector<double>{1, 2, 5});
  CHECK(h.bucket_counts() == std::vector<std::uint64_t>{0, 0, 0, 0});
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 9.0}) h.observe(v);  // le is inclusive
  CHECK(h.count() == 6);
  CHECK(h.sum() == 18);
  CHECK(h.bucket_counts() == std::vector<std::uint64_t>{2, 4, 5, 6});
  h.observe(std::numeric_limits<double>::quiet_NaN());
  CHECK(h.bucket_counts() == std::vector<std::uint64_t>{2, 4, 5, 7});
}

TEST_CASE("histogram buckets: defaults, +Inf, strictly increasing") {
  const auto d = vgen::default_latency_buckets();
  REQUIRE(d.size() >= 10);
  CHECK(d.front() == 0.001);
  CHECK(d.back() == 60);
  for (std::size_t i = 1; i < d.size(); ++i) CHECK(d[i - 1] < d[i]);
  CHECK(vgen::Histogram().bounds() == d);

  const double inf = std::numeric_limits<double>::infinity();
  CHECK(vgen::Histogram({1, inf}).bounds() == std::vector<double>{1});
  CHECK(vgen::Histogram(std::vector<double>{}).bucket_counts().size() == 1);
  CHECK_THROWS_AS(vgen::Histogram({1, 1}), Error);
  CHECK_THROWS_AS(vgen::Histogram({2, 1}), Error);
  CHECK_THROWS_AS(vgen::Histogram({1, std::nan(""), 3}), Error);
  CHECK_THROWS_AS(vgen::Histogram({-inf, 1}), Error);
}

TEST_CASE("registry returns the same series for the same name and labels") {
  MetricsRegistry r;
  const Labels labels{{"stage", "encode"}, {"device", "cuda:0"}};
  const Labels reversed{{"device", "cuda:0"}, {"stage", "encode"}};
  vgen::Counter& a = r.counter("jobs_total", "Jobs.", labels);
  vgen::Counter& b = r.counter("jobs_total", "other help", reversed);
  vgen::Counter& other = r.counter("jobs_total", "Jobs.", {{"device", "cuda:1"}, {"stage", "e"}});
  CHECK(&a == &b);
  CHECK(&a != &other);
  CHECK(&r.gauge("depth", "d") == &r.gauge("depth", "d"));
  CHECK(&r.histogram("lat", "l", {{"s", "x"}}) == &r.histogram("lat", "l", {{"s", "x"}}));

  // References stay valid while many more series and families are added.
  a.inc(7);
  for (int i = 0; i < 200; ++i) {
    r.counter("jobs_total", "Jobs.", {{"stage", std::to_string(i)}});
    r.gauge("g" + std::to_string(i), "g");
  }
  CHECK(&r.counter("jobs_total", "Jobs.", labels) == &a);
  CHECK(a.value() == 7);
}

TEST_CASE("exposition text for a small registry") {
  MetricsRegistry r;
  vgen::Counter& ok = r.counter("vgen_jobs_total", "Jobs finished.", {{"status", "ok"}});
  r.counter("vgen_jobs_total", "Jobs finished.", {{"status", "failed"}}).inc(2);
  ok.inc(3);
  r.gauge("vgen_queue_depth", "Jobs waiting.").set(4.5);
  vgen::Histogram& h = r.histogram("vgen_step_seconds", "Step latency.",
                                   {{"stage", "decode"}, {"device", "cuda:0"}}, {0.1, 1});
  h.observe(0.25);
  h.observe(0.5);
  h.observe(7);
  h.observe(0.0625);

  CHECK(r.render_prometheus() ==
        "# HELP vgen_jobs_total Jobs finished.\n"
        "# TYPE vgen_jobs_total counter\n"
        "vgen_jobs_total{status=\"failed\"} 2\n"
        "vgen_jobs_total{status=\"ok\"} 3\n"
        "# HELP vgen_queue_depth Jobs waiting.\n"
        "# TYPE vgen_queue_depth gauge\n"
        "vgen_queue_depth 4.5\n"
        "# HELP vgen_step_seconds Step latency.\n"
        "# TYPE vgen_step_seconds histogram\n"
        "vgen_step_seconds_bucket{device=\"cuda:0\",stage=\"decode\",le=\"0.1\"} 1\n"
        "vgen_step_seconds_bucket{device=\"cuda:0\",stage=\"decode\",le=\"1\"} 3\n"
        "vgen_step_seconds_bucket{device=\"cuda:0\",stage=\"decode\",le=\"+Inf\"} 4\n"
        "vgen_step_seconds_sum{device=\"cuda:0\",stage=\"decode\"} 7.8125\n"
        "vgen_step_seconds_count{device=\"cuda:0\",stage=\"decode\"} 4\n");
}

TEST_CASE("an unlabelled histogram renders le as its only label") {
  MetricsRegistry r;
  r.histogram("h", "x", {}, {0.5}).observe(1);
  CHECK(r.render_prometheus() ==
        "# HELP h x\n# TYPE h histogram\n"
        "h_bucket{le=\"0.5\"} 0\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n");
}

TEST_CASE("numbers: integers without exponent, others shortest round-trip") {
  CHECK(render_gauge(3) == "# HELP g h\n# TYPE g gauge\ng 3\n");
  const std::string prefix = "# HELP g h\n# TYPE g gauge\ng ";
  CHECK(render_gauge(1e6) == prefix + "1000000\n");
  CHECK(render_gauge(-42) == prefix + "-42\n");
  CHECK(render_gauge(-0.0) == prefix + "0\n");
  CHECK(render_gauge(0.1) == prefix + "0.1\n");
  CHECK(render_gauge(0.0025) == prefix + "0.0025\n");
  CHECK(render_gauge(1.0 / 3) == prefix + "0.3333333333333333\n");
  CHECK(render_gauge(1e20) == prefix + "1e+20\n");
  CHECK(render_gauge(std::nan("")) == prefix + "NaN\n");
  CHECK(render_gauge(std::numeric_limits<double>::infinity()) == prefix + "+Inf\n");
  CHECK(render_gauge(-std::numeric_limits<double>::infinity()) == prefix + "-Inf\n");
}

TEST_CASE("label values and help text are escaped") {
  MetricsRegistry r;
  r.counter("c", "a \\ backslash, a \"quote\"\nand a newline", {{"path", "C:\\x\"y\"\nz"}}).inc();
  CHECK(r.render_prometheus() ==
        "# HELP c a \\\\ backslash, a \"quote\"\\nand a newline\n"
        "# TYPE c counter\n"
        "c{path=\"C:\\\\x\\\"y\\\"\\nz\"} 1\n");
}

TEST_CASE("invalid names, duplicate labels and type clashes throw invalid_argument") {
  MetricsRegistry r;
  check_invalid([&] { r.counter("", "h"); }, "''");
  check_invalid([&] { r.counter("1jobs", "h"); }, "1jobs");
  check_invalid([&] { r.gauge("jobs-total", "h"); }, "jobs-total");
  check_invalid([&] { r.histogram("lat ency", "h"); }, "lat ency");
  check_invalid([&] { r.counter("ok", "h", {{"bad-label", "v"}}); }, "bad-label");
  check_invalid([&] { r.counter("ok", "h", {{"a:b", "v"}}); }, "a:b");
  check_invalid([&] { r.counter("ok", "h", {{"9x", "v"}}); }, "9x");
  check_invalid([&] { r.counter("ok", "h", {{"k", "1"}, {"k", "2"}}); }, "'k'");
  check_invalid([&] { r.histogram("lat", "h", {{"le", "1"}}); }, "le");
  check_invalid([&] { r.histogram("lat", "h", {}, {1, 0.5}); }, "strictly increasing");

  // Valid edge cases: colons in metric names, leading underscores, empty label values.
  CHECK_NOTHROW(r.counter("ns:sub_total", "h", {{"_k", ""}}));
  CHECK_NOTHROW(r.gauge("_x", "h", {{"A1", "v"}}));

  r.counter("jobs_total", "h");
  check_invalid([&] { r.gauge("jobs_total", "h"); }, "jobs_total");
  check_invalid([&] { r.histogram("jobs_total", "h"); }, "jobs_total");
  r.histogram("lat2", "h", {}, {1, 2});
  CHECK_NOTHROW(r.histogram("lat2", "h", {{"x", "y"}}, {1, 2}));
  check_invalid([&] { r.histogram("lat2", "h", {}, {1, 3}); }, "lat2");
  check_invalid([&] { r.counter("lat2", "h"); }, "lat2");

  // Failed registrations leave no trace in the exposition.
  CHECK(r.render_prometheus().find("ok") == std::string::npos);
  CHECK(r.render_prometheus().find("lat ") == std::string::npos);
}

TEST_CASE("concurrent increments and observations are exact" * doctest::timeout(60)) {
  constexpr int per_thread = 100000;
  for (int threads : {1, 4}) {
    CAPTURE(threads);
    MetricsRegistry r;
    vgen::Counter& c = r.counter("ops_total", "ops");
    vgen::Histogram& h = r.histogram("size", "sizes", {}, {1});
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        for (int i = 0; i < per_thread; ++i) {
          c.inc();
          h.observe(i % 2 == 0 ? 0.5 : 2.0);  // binary fractions: the sum stays exact
        }
      });
    }
    for (auto& t : pool) t.join();
    const auto n = static_cast<std::uint64_t>(threads) * per_thread;
    CHECK(c.value() == static_cast<double>(n));
    CHECK(h.count() == n);
    CHECK(h.sum() == 1.25 * static_cast<double>(n));
    CHECK(h.bucket_counts() == std::vector<std::uint64_t>{n / 2, n});
  }
}

TEST_CASE("concurrent registration hands every thread the same series" * doctest::timeout(60)) {
  MetricsRegistry r;
  constexpr std::size_t threads = 4;
  std::vector<vgen::Counter*> seen(threads);
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        r.counter("shared_total", "s", {{"i", std::to_string(i % 10)}}).inc();
        if (i % 100 == 0) (void)r.render_prometheus();
      }
      seen[t] = &r.counter("shared_total", "s", {{"i", "0"}});
    });
  }
  for (auto& t : pool) t.join();
  for (auto* p : seen) CHECK(p == seen[0]);
  CHECK(seen[0]->value() == threads * 100);
  CHECK(r.render_prometheus().find("shared_total{i=\"9\"} 400\n") != std::string::npos);
}
