// The Pipeline's hooks (before_first_stage, a stage's before) and optional stages. The other
// cases are in test_pipeline.cpp (split at its size limit); the stub stages in pipeline_stubs.hpp.
#include "runtime/pipeline.hpp"

#include "tests/runtime/pipeline_stubs.hpp"
#include "tests/support/async_test.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace vgen;
using namespace vgen::pipeline_test;
using vgen::test::run_async;
using vgen::test::sleep_for;
using namespace std::chrono_literals;

TEST_CASE("a before_first_stage hook runs first, keeps the job queued, and may finish it early" * doctest::timeout(60)) {
  for (std::size_t workers : {1, 3}) {
    CAPTURE(workers);
    run_async([&](asio::io_context& io) -> asio::awaitable<void> {
      Ledger ledger;
      std::atomic<int> hooked{0};
      std::vector<std::string> hook_status;  // the job's status while the hook ran (one hook worker at a time)
      std::mutex m;
      std::atomic<int> queued_events{0};
      PipelineOptions opts;
      opts.on_event = [&](const JobEvent& e) { queued_events += e.state == JobState::queued; };
      opts.before_first_stage = PipelineHook{"lookup", workers, 4, [&](Job& job) -> asio::awaitable<HookOutcome> {
        ++hooked;
        {
          std::lock_guard l(m);
          hook_status.emplace_back(job.snapshot().status());
        }
        co_await sleep_for(100us);
        co_return index_of(job) % 2 == 0 ? HookOutcome::done : HookOutcome::go_on;  // even ones end here
      }};
      Pipeline p(io.get_executor(), stub_stages(ledger), opts);
      REQUIRE(p.stages().size() == 5);
      CHECK(p.stages().front().name == "lookup");
      p.start();
      std::vector<std::shared_ptr<Job>> jobs;
      for (int i = 0; i < 10; ++i) jobs.push_back(co_await p.submit(spec_for(i)));
      co_await p.drain();
      CHECK(hooked == 10);
      CHECK(queued_events == 10);  // one as the hook takes each job
      for (const auto& s : hook_status) CHECK(s == "queued");
      for (auto& j : jobs) {
        const bool early = index_of(*j) % 2 == 0;
        CHECK(j->state() == JobState::done);
        CHECK(j->snapshot().stage_seconds.count("lookup") == 1);
        for (const char* stage : {"preprocess", "denoise", "decode", "encode"})
          CHECK(ledger.count(stage, j->id()) == (early ? 0u : 1u));
      }
      CHECK(p.counts().done == 10);
    });
  }
}

TEST_CASE("a failing hook fails only its job; a stage's before runs once per entry, not per retry" * doctest::timeout(60)) {
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    std::map<std::string, int> befores, attempts;
    PipelineOptions opts;
    opts.retry_seed = 1;
    opts.before_first_stage = PipelineHook{"check", 1, 4, [](Job& job) -> asio::awaitable<HookOutcome> {
      if (job.id() == "bad") throw Error(ErrorKind::invalid_argument, "refused by the hook");
      co_return HookOutcome::go_on;
    }};
    StageSpec only{"only", 1, 4, [&](Job& job) -> asio::awaitable<void> {
      if (++attempts[job.id()] < 3) throw Error(ErrorKind::transient, "try again");
      co_return;
    }};
    only.retry = RetryPolicy{.max_attempts = 5, .base_delay = 1ms, .multiplier = 1.0, .max_delay = 1ms};
    only.before = [&](Job& job) -> asio::awaitable<void> {
      CHECK(job.snapshot().status() == "only");  // the stage has begun
      ++befores[job.id()];
      co_return;
    };
    Pipeline p(io.get_executor(), {only}, opts);
    p.start();
    auto good = co_await p.submit(boost::json::object{}, "good");
    auto bad = co_await p.submit(boost::json::object{}, "bad");
    co_await p.drain();
    CHECK(good->state() == JobState::done);
    CHECK(attempts["good"] == 3);
    CHECK(befores["good"] == 1);  // the retries did not run it again
    CHECK(good->snapshot().attempts == 2);
    CHECK(bad->state() == JobState::failed);
    CHECK(bad->snapshot().error == "refused by the hook");
    CHECK(befores.count("bad") == 0);
    CHECK(attempts.count("bad") == 0);
  });
}

TEST_CASE("optional stages: a job that a stage does not apply to skips it, including the last" * doctest::timeout(120)) {
  for (int threads : {1, 4}) {
    CAPTURE(threads);
    Ledger ledger;
    MetricsRegistry metrics;
    std::vector<std::shared_ptr<Job>> jobs;
    auto note = [&ledger](std::string name) {
      return StageFn([&ledger, name](Job& job) -> asio::awaitable<void> {
        ledger.note(name, job.id());
        co_return;
      });
    };
    // Job i goes through "odd" when i is odd, through "third" when i % 3 == 0 (the last stage).
    auto stages = std::vector<StageSpec>{{"first", 2, 2, note("first")}, {"odd", 1, 1, note("odd")},
                                         {"middle", 2, 2, note("middle")}, {"third", 1, 1, note("third")}};
    stages[1].applies = [](const Job& job) { return index_of(job) % 2 == 1; };
    stages[3].applies = [](const Job& job) { return index_of(job) % 3 == 0; };
    run_async([&](asio::io_context& io) -> asio::awaitable<void> {
      PipelineOptions opts;
      opts.metrics = &metrics;
      Pipeline p(io.get_executor(), stages, opts);
      p.start();
      for (int i = 0; i < 40; ++i) jobs.push_back(co_await p.submit(spec_for(i)));
      co_await p.drain();  // end of stream flows through the skipped stages: drain returns
      CHECK(p.counts().done == 40);
    }, vgen::test::default_timeout, threads);
    for (int i = 0; i < 40; ++i) {
      const auto& j = jobs[i];
      CHECK(j->state() == JobState::done);
      CHECK(ledger.count("first", j->id()) == 1);
      CHECK(ledger.count("middle", j->id()) == 1);
      CHECK(ledger.count("odd", j->id()) == (i % 2 == 1 ? 1 : 0));
      CHECK(ledger.count("third", j->id()) == (i % 3 == 0 ? 1 : 0));
    }
    const auto text = metrics.render_prometheus();
    CHECK(text.find("vgen_stage_duration_seconds_count{stage=\"odd\"} 20") != std::string::npos);
    CHECK(text.find("vgen_stage_duration_seconds_count{stage=\"third\"} 14") != std::string::npos);
  }
}
