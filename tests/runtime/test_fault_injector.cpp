// Fault injection: plans parse strictly; draws are deterministic; wrapped stub stages fail
// transiently (retried to success), permanently (only the doomed jobs) and slow down.
#include "runtime/errors.hpp"
#include "runtime/fault_injector.hpp"
#include "tests/support/async_test.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

using namespace vgen;
namespace asio = boost::asio;
namespace json = boost::json;
using vgen::test::run_async;

namespace {

FaultPlan plan(const char* text) { return parse_fault_plan(json::parse(text).as_object(), "faults"); }

std::vector<StageSpec> stages(const FaultInjector& f, int attempts) {
  std::vector<StageSpec> out;
  for (const char* name : {"preprocess", "denoise"}) {
    StageSpec s{name, 2, 8, [](Job&) -> asio::awaitable<void> { co_return; }};
    if (attempts > 1) s.retry = RetryPolicy{.max_attempts = attempts, .base_delay = std::chrono::milliseconds(0)};
    out.push_back(f.wrap(std::move(s)));
  }
  return out;
}

asio::awaitable<void> submit_all(asio::any_io_executor ex, const FaultInjector* f, int attempts, int n,
                                 std::vector<std::shared_ptr<Job>>* jobs) {
  Pipeline p(ex, stages(*f, attempts));
  p.start();
  for (int i = 0; i < n; ++i) {
    json::object spec;  // (GCC 12: no braced init lists of string literals inside coroutines)
    spec["i"] = i;
    jobs->push_back(co_await p.submit(std::move(spec)));
  }
  co_await p.drain();
}

std::vector<std::shared_ptr<Job>> run(const FaultInjector& f, int attempts, int n) {
  std::vector<std::shared_ptr<Job>> jobs;
  run_async([&](asio::io_context& io) { return submit_all(io.get_executor(), &f, attempts, n, &jobs); });
  return jobs;
}

}  // namespace

TEST_CASE("plans are parsed strictly") {
  const auto p = plan(R"({"seed": 5, "oom_rate": 0.1, "oom_above_batch": 2,
                          "stages": {"*": {"transient_rate": 0.3}, "encode": {"permanent_rate": 0.5, "latency_ms": 10}}})");
  CHECK(p.seed == 5);
  CHECK(p.enabled());
  CHECK(p.stages.at("*").transient_rate == 0.3);
  CHECK(p.stages.at("encode").latency == std::chrono::milliseconds(10));
  CHECK_FALSE(FaultPlan{}.enabled());
  for (const char* bad : {R"({"stages": {"x": {"transient_rate": 1.5}}})", R"({"stages": {"x": {"rate": 0.1}}})",
                          R"({"colour": 1})", R"({"stages": {"x": {"transient_rate": 0.6, "permanent_rate": 0.6}}})",
                          R"({"oom_above_batch": -1})"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(plan(bad), Error);
  }
  try {
    plan(R"({"stages": {"denoise": {"transient_rate": 2}}})");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("faults.stages.denoise.transient_rate") != std::string::npos);
  }
}

TEST_CASE("draws depend only on seed, job, stage and attempt") {
  const FaultInjector a(plan(R"({"seed": 1})")), b(plan(R"({"seed": 1})")), c(plan(R"({"seed": 2})"));
  CHECK(a.draw("job-1", "encode", 0) == b.draw("job-1", "encode", 0));
  CHECK(a.draw("job-1", "encode", 0) != c.draw("job-1", "encode", 0));
  CHECK(a.draw("job-1", "encode", 0) != a.draw("job-1", "encode", 1));
  double sum = 0;
  for (int i = 0; i < 2000; ++i) {
    const double u = a.draw("job-" + std::to_string(i), "x", 0);
    CHECK(u >= 0.0);
    CHECK(u < 1.0);
    sum += u;
  }
  CHECK(sum / 2000 == doctest::Approx(0.5).epsilon(0.05));
}

TEST_CASE("transient faults are retried to success; permanent ones fail exactly their jobs" * doctest::timeout(120)) {
  const FaultInjector transient(plan(R"({"seed": 9, "stages": {"*": {"transient_rate": 0.5}}})"));
  int retries = 0;
  for (auto& j : run(transient, 30, 40)) {
    CHECK(j->state() == JobState::done);
    retries += j->snapshot().attempts;
  }
  CHECK(retries > 20);

  const FaultInjector permanent(plan(R"({"seed": 4, "stages": {"denoise": {"permanent_rate": 0.25}}})"));
  int failed = 0;
  for (auto& j : run(permanent, 3, 40)) {
    const bool doomed = permanent.draw(j->id(), "denoise", 0) < 0.25;
    CHECK(j->state() == (doomed ? JobState::failed : JobState::done));
    if (doomed) CHECK(j->snapshot().error.find("injected permanent fault in denoise") != std::string::npos);
    failed += doomed;
  }
  CHECK(failed > 0);
}

TEST_CASE("latency is added; out of memory is reported above the batch limit") {
  const FaultInjector slow(plan(R"({"stages": {"preprocess": {"latency_ms": 30}}})"));
  const auto t0 = std::chrono::steady_clock::now();
  run(slow, 1, 2);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(30));
  const FaultInjector oom(plan(R"({"oom_above_batch": 2})"));
  CHECK_NOTHROW(oom.check_oom(2, "cpu:0", "job-1", 0));
  try {
    oom.check_oom(3, "cpu:0", "job-1", 0);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::out_of_memory);
  }
}

TEST_CASE("a held job stays in its stage until it is cancelled; other jobs pass" * doctest::timeout(60)) {
  const FaultInjector hold(plan(R"({"hold": [{"stage": "denoise", "prompt": "held"}]})"));
  CHECK(hold.plan().enabled());
  CHECK(hold.holds("denoise", json::parse(R"({"prompt": "a held cat"})")));
  CHECK_FALSE(hold.holds("preprocess", json::parse(R"({"prompt": "a held cat"})")));
  CHECK_FALSE(hold.holds("denoise", json::parse(R"({"prompt": "a free cat"})")));
  CHECK(plan(R"({"hold": {"stage": "encode", "prompt": "x"}})").holds.size() == 1);
  CHECK_THROWS_AS(plan(R"({"hold": {"stage": "encode"}})"), Error);
  CHECK_THROWS_AS(plan(R"({"hold": [{"stage": "encode", "prompt": ""}]})"), Error);
  JobState held_after_free = JobState::queued, held_end = JobState::queued, free_end = JobState::queued;
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    Pipeline p(io.get_executor(), stages(hold, 1));
    p.start();
    json::object a, b;  // (GCC 12: no braced init lists of string literals inside coroutines)
    a["prompt"] = "a held cat";
    b["prompt"] = "a free cat";
    auto held = co_await p.submit(std::move(a));
    auto free = co_await p.submit(std::move(b));
    co_await free->finished_event().wait(asio::use_awaitable);
    free_end = free->state();
    held_after_free = held->state();  // it cannot end without the cancel below
    held->request_cancel();
    co_await held->finished_event().wait(asio::use_awaitable);
    held_end = held->state();
    co_await p.drain();
  });
  CHECK(free_end == JobState::done);
  CHECK_FALSE(is_terminal(held_after_free));
  CHECK(held_end == JobState::cancelled);
}
