#include "runtime/pipeline.hpp"

#include "runtime/trace.hpp"
#include "tests/support/async_test.hpp"
#include "tests/runtime/pipeline_stubs.hpp"

#include <boost/asio/detached.hpp>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace vgen;
using vgen::test::run_async;
using vgen::test::sleep_for;
using namespace std::chrono_literals;

using namespace vgen::pipeline_test;

TEST_CASE("every submitted job flows through every stage exactly once" * doctest::timeout(120)) {
  for (int threads : {1, 4}) {
    CAPTURE(threads);
    Ledger ledger;
    MetricsRegistry metrics;
    std::atomic<int> progress_events{0};
    std::vector<std::shared_ptr<Job>> jobs;
    run_async([&](asio::io_context& io) -> asio::awaitable<void> {
      PipelineOptions opts;
      opts.metrics = &metrics;
      opts.on_event = [&](const JobEvent& e) { if (e.status() == "denoise" && e.total == 4) ++progress_events; };
      Pipeline p(io.get_executor(), stub_stages(ledger), opts);
      p.start();
      for (int i = 0; i < 60; ++i) jobs.push_back(co_await p.submit(spec_for(i)));  // backpressure
      co_await p.drain();
      auto c = p.counts();
      CHECK(c.submitted == 60);
      CHECK(c.done == 60);
      CHECK(c.in_flight == 0);
    }, vgen::test::default_timeout, threads);
    for (auto& j : jobs) {
      CHECK(j->state() == JobState::done);
      for (auto stage : {"preprocess", "denoise", "decode", "encode"}) CHECK(ledger.count(stage, j->id()) == 1);
    }
    CHECK(progress_events == 60 * 4);
    const auto text = metrics.render_prometheus();
    CHECK(text.find("vgen_jobs_finished_total{state=\"done\"} 60") != std::string::npos);
    CHECK(text.find("vgen_stage_duration_seconds_count{stage=\"denoise\"} 60") != std::string::npos);
    CHECK(text.find("vgen_queue_depth{stage=\"encode\"}") != std::string::npos);
  }
}

TEST_CASE("after_job_end runs once per ended job, after the in-flight count dropped (the terminal event comes before)" *
          doctest::timeout(120)) {
  Ledger ledger;
  std::mutex m;
  std::vector<std::size_t> at_terminal, at_end;  // in_flight seen by on_event's terminal event, by after_job_end
  Pipeline* pipeline = nullptr;
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    auto fail_one = [](Job& job) -> asio::awaitable<void> {
      if (index_of(job) == 1) throw Error(ErrorKind::invalid_argument, "bad job");
      co_return;
    };
    PipelineOptions opts;
    opts.on_event = [&](const JobEvent& e) {
      if (!is_terminal(e.state)) return;
      std::lock_guard lock(m);
      at_terminal.push_back(pipeline->counts().in_flight);
    };
    opts.after_job_end = [&] {
      std::lock_guard lock(m);
      at_end.push_back(pipeline->counts().in_flight);
    };
    Pipeline p(io.get_executor(), stub_stages(ledger, fail_one), opts);
    pipeline = &p;
    p.start();
    for (int i = 0; i < 3; ++i) co_await p.submit(spec_for(i));
    co_await p.drain();
  }, vgen::test::default_timeout, 1);
  REQUIRE(at_end.size() == 3);  // done, failed and done: each once
  REQUIRE(at_terminal.size() == 3);
  // One io thread: nothing runs between a job's terminal event and its after_job_end, so each
  // sees one job fewer in flight there than at its terminal event (the ended one).
  std::size_t total_end = 0, total_terminal = 0;
  for (auto n : at_end) total_end += n;
  for (auto n : at_terminal) total_terminal += n;
  CHECK(total_terminal == total_end + 3);
}

TEST_CASE("a failing job fails alone; the others finish" * doctest::timeout(120)) {
  Ledger ledger;
  std::vector<std::shared_ptr<Job>> jobs;
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    auto fail_some = [](Job& job) -> asio::awaitable<void> {
      if (index_of(job) % 5 == 0) throw Error(ErrorKind::invalid_argument, "bad job " + job.id());
      co_return;
    };
    Pipeline p(io.get_executor(), stub_stages(ledger, fail_some));
    p.start();
    for (int i = 0; i < 40; ++i) jobs.push_back(co_await p.submit(spec_for(i)));
    co_await p.drain();
    CHECK(p.counts().failed == 8);
    CHECK(p.counts().done == 32);
  }, vgen::test::default_timeout, 2);
  for (auto& j : jobs) {
    const bool should_fail = index_of(*j) % 5 == 0;
    CHECK(j->state() == (should_fail ? JobState::failed : JobState::done));
    if (should_fail) {
      CHECK(*j->snapshot().error_kind == ErrorKind::invalid_argument);
      CHECK(ledger.count("decode", j->id()) == 0);  // a failed job goes no further
    }
  }
}

TEST_CASE("transient stage failures are retried and then succeed" * doctest::timeout(120)) {
  Ledger ledger;
  MetricsRegistry metrics;
  std::mutex m;
  std::set<std::string> failed_once;
  std::vector<std::shared_ptr<Job>> jobs;
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    auto flaky = [&](Job& job) -> asio::awaitable<void> {
      std::lock_guard l(m);
      if (index_of(job) % 3 == 0 && failed_once.insert(job.id()).second)
        throw Error(ErrorKind::transient, "device busy");
      co_return;
    };
    auto stages = stub_stages(ledger, flaky);
    stages[1].retry = RetryPolicy{.max_attempts = 3, .base_delay = 1ms, .multiplier = 2.0, .max_delay = 5ms};
    PipelineOptions opts;
    opts.metrics = &metrics;
    opts.retry_seed = 42;
    Pipeline p(io.get_executor(), std::move(stages), opts);
    p.start();
    for (int i = 0; i < 30; ++i) jobs.push_back(co_await p.submit(spec_for(i)));
    co_await p.drain();
    CHECK(p.counts().done == 30);
  }, vgen::test::default_timeout, 2);
  int retried = 0;
  for (auto& j : jobs) {
    CHECK(j->state() == JobState::done);
    retried += j->snapshot().attempts;
  }
  CHECK(retried == 10);
  CHECK(metrics.render_prometheus().find("vgen_stage_retries_total{stage=\"denoise\"} 10") != std::string::npos);
}

TEST_CASE("cancellation ends queued and running jobs as cancelled; the rest finish" * doctest::timeout(120)) {
  for (int threads : {1, 3}) {
    Ledger ledger;
    std::vector<std::shared_ptr<Job>> jobs;
    run_async([&](asio::io_context& io) -> asio::awaitable<void> {
      // Jobs with odd index wait "forever" in denoise (until cancelled).
      auto park_odd = [](Job& job) -> asio::awaitable<void> {
        if (index_of(job) % 2 == 1) co_await sleep_for(std::chrono::hours(1));
      };
      Pipeline p(io.get_executor(), stub_stages(ledger, park_odd, 2, 64));
      p.start();
      for (int i = 0; i < 20; ++i) jobs.push_back(co_await p.submit(spec_for(i)));
      // Wait until both denoise workers are parked on odd jobs, then cancel every odd job
      // (some are then running, the others still queued).
      auto parked = [&] {
        int n = 0;
        for (auto& j : jobs) n += index_of(*j) % 2 == 1 && j->snapshot().status() == "denoise";
        return n;
      };
      while (parked() < 2) co_await sleep_for(1ms);
      for (auto& j : jobs)
        if (index_of(*j) % 2 == 1) CHECK(p.cancel(j->id()));
      co_await p.drain();
      CHECK_FALSE(p.cancel("no-such-job"));
    }, vgen::test::default_timeout, threads);
    for (auto& j : jobs) {
      CHECK(j->state() == (index_of(*j) % 2 ? JobState::cancelled : JobState::done));
      if (index_of(*j) % 2) CHECK(ledger.count("decode", j->id()) == 0);
    }
  }
}

TEST_CASE("a cancel that lands after the last stage finished its work leaves the job done" * doctest::timeout(60)) {
  // `vgen batch` stopped by a signal just as an output was renamed into place: the file is
  // complete, so the job is done (the summary and the journal must not call it cancelled).
  Ledger ledger;
  std::shared_ptr<Job> last, middle;
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    Pipeline* pipeline = nullptr;
    auto stages = stub_stages(ledger);
    stages[3].fn = [&pipeline](Job& job) -> asio::awaitable<void> {  // encode: its work done, then the cancel
      co_await sleep_for(100us);
      CHECK(pipeline->cancel(job.id(), "stopped by a signal"));
    };
    stages[2].fn = [&pipeline](Job& job) -> asio::awaitable<void> {  // decode of job 1: cancelled after it
      co_await sleep_for(100us);
      if (job.spec().at("i").as_int64() == 1) CHECK(pipeline->cancel(job.id(), "stopped by a signal"));
    };
    Pipeline p(io.get_executor(), std::move(stages));
    pipeline = &p;
    p.start();
    last = co_await p.submit(spec_for(0));
    middle = co_await p.submit(spec_for(1));
    co_await p.drain();
  });
  CHECK(last->state() == JobState::done);
  CHECK(middle->state() == JobState::cancelled);  // a stage before the last: the job still ends there
}

TEST_CASE("a job past its deadline fails with deadline_exceeded" * doctest::timeout(60)) {
  Ledger ledger;
  std::shared_ptr<Job> slow, fast;
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    auto park_first = [](Job& job) -> asio::awaitable<void> {
      if (index_of(job) == 0) co_await sleep_for(std::chrono::hours(1));
    };
    Pipeline p(io.get_executor(), stub_stages(ledger, park_first));
    p.start();
    slow = co_await p.submit(spec_for(0), "slow", Job::clock::now() + 50ms);
    fast = co_await p.submit(spec_for(1), "fast", Job::clock::now() + std::chrono::hours(1));
    co_await p.drain();
  });
  CHECK(slow->state() == JobState::failed);
  CHECK(*slow->snapshot().error_kind == ErrorKind::deadline_exceeded);
  CHECK(fast->state() == JobState::done);
}

TEST_CASE("shutdown mid-traffic accounts for every job" * doctest::timeout(120)) {
  for (int threads : {1, 4}) {
    Ledger ledger;
    std::mutex m;
    std::vector<std::shared_ptr<Job>> jobs;
    std::atomic<int> refused{0};
    run_async([&](asio::io_context& io) -> asio::awaitable<void> {
      auto slow = [](Job&) -> asio::awaitable<void> { co_await sleep_for(2ms); };
      Pipeline p(io.get_executor(), stub_stages(ledger, slow, 2, 4));
      p.start();
      std::atomic<int> producers{3};
      for (int t = 0; t < 3; ++t) {
        asio::co_spawn(io, [&, t]() -> asio::awaitable<void> {
          for (int i = 0; i < 50; ++i) {
            try {
              auto j = co_await p.submit(spec_for(t * 100 + i));
              std::lock_guard l(m);
              jobs.push_back(j);
            } catch (const Error& e) {
              CHECK(e.kind() == ErrorKind::overloaded);
              ++refused;
            }
          }
          --producers;
        }, asio::detached);
      }
      while (p.counts().done < 10) co_await sleep_for(1ms);
      co_await p.shutdown();
      while (producers > 0) co_await sleep_for(1ms);
      auto c = p.counts();
      CHECK(c.in_flight == 0);
      CHECK(c.done + c.failed + c.cancelled == c.submitted);
      CHECK(c.submitted + static_cast<std::uint64_t>(refused.load()) == 150);
      CHECK_THROWS_AS(p.try_submit(spec_for(999)), Error);
    }, vgen::test::default_timeout, threads);
    for (auto& j : jobs) {
      const auto s = j->state();
      CHECK(is_terminal(s));
      if (s == JobState::done)
        for (auto stage : {"preprocess", "denoise", "decode", "encode"}) CHECK(ledger.count(stage, j->id()) == 1);
      else
        CHECK(s == JobState::cancelled);
      CHECK(ledger.count("encode", j->id()) <= 1);
    }
  }
}

TEST_CASE("try_submit refuses when the first queue is full" * doctest::timeout(60)) {
  Ledger ledger;
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    Pipeline p(io.get_executor(), stub_stages(ledger, {}, 1, 2));  // not started: nothing drains
    p.try_submit(spec_for(0));
    p.try_submit(spec_for(1));
    try {
      p.try_submit(spec_for(2));
      FAIL("expected overloaded");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::overloaded);
    }
    CHECK(p.counts().rejected == 1);
    CHECK_THROWS_AS(p.try_submit(spec_for(3), "job-1"), Error);  // id in use
    co_await p.drain();  // starts the workers and runs what was accepted
    CHECK(p.counts().done == 2);
  });
}

TEST_CASE("bad stage descriptions are rejected") {
  asio::io_context io;
  CHECK_THROWS_AS(Pipeline(io.get_executor(), {}), Error);
  Ledger ledger;
  auto stages = stub_stages(ledger);
  stages[2].workers = 0;
  CHECK_THROWS_AS(Pipeline(io.get_executor(), stages), Error);
  stages = stub_stages(ledger);
  stages[3].name = "preprocess";
  CHECK_THROWS_AS(Pipeline(io.get_executor(), stages), Error);
}

// ---- trace timeline (issue 24): hooks in process() and the retry observer ----
TEST_CASE("with a tracer recording, each job's queue waits, stages and retries are on its tracks" * doctest::timeout(120)) {
  for (int threads : {1, 3}) {
    CAPTURE(threads);
    Ledger ledger;
    Tracer tracer;
    std::mutex m;
    std::set<std::string> failed_once;
    boost::json::value trace;
    run_async([&](asio::io_context& io) -> asio::awaitable<void> {
      auto flaky = [&](Job& job) -> asio::awaitable<void> {
        std::lock_guard l(m);
        if (index_of(job) == 0 && failed_once.insert(job.id()).second) throw Error(ErrorKind::transient, "device busy");
        co_return;
      };
      auto stages = stub_stages(ledger, flaky);
      stages[1].retry = RetryPolicy{.max_attempts = 3, .base_delay = 1ms, .multiplier = 2.0, .max_delay = 5ms};
      PipelineOptions opts;
      opts.tracer = &tracer;
      Pipeline p(io.get_executor(), std::move(stages), opts);
      p.start();
      const auto start = tracer.begin();
      for (int i = 0; i < 8; ++i) co_await p.submit(spec_for(i));
      co_await p.drain();
      trace = tracer.end(start);
    }, vgen::test::default_timeout, threads);
    CHECK(check_trace_json(trace).empty());
    std::map<std::pair<std::int64_t, std::int64_t>, std::string> names;
    for (const auto& e : trace.at("traceEvents").as_array())
      if (e.at("ph").as_string() == "M" && e.at("name").as_string() == "thread_name")
        names[{e.at("pid").to_number<std::int64_t>(), e.at("tid").to_number<std::int64_t>()}] = e.at("args").at("name").as_string().c_str();
    std::map<std::string, int> on_jobs, on_workers, queued;
    int retries = 0;
    for (const auto& v : trace.at("traceEvents").as_array()) {
      const auto& e = v.as_object();
      if (e.at("ph").as_string() == "M") continue;
      const auto track = names[{e.at("pid").to_number<std::int64_t>(), e.at("tid").to_number<std::int64_t>()}];
      const std::string name(e.at("name").as_string());
      if (name == "retry denoise") {
        ++retries;
        CHECK(track == "job job-1");
      } else if (name.rfind("queued ", 0) == 0) {
        ++queued[name.substr(7)];
        CHECK(track.rfind("job ", 0) == 0);
      } else if (track.rfind("job ", 0) == 0) {
        ++on_jobs[name];
      } else {
        CHECK(track.rfind(name + " worker ", 0) == 0);
        ++on_workers[name];
      }
    }
    CHECK(retries == 1);
    for (const auto* stage : {"preprocess", "denoise", "decode", "encode"}) {
      CAPTURE(stage);
      CHECK(queued[stage] == 8);  // a retry runs inside its stage: no second wait
      CHECK(on_jobs[stage] == 8);
      CHECK(on_workers[stage] == on_jobs[stage]);
    }
  }
}

TEST_CASE("without a capture the pipeline records nothing") {
  Ledger ledger;
  Tracer tracer;
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    PipelineOptions opts;
    opts.tracer = &tracer;
    Pipeline p(io.get_executor(), stub_stages(ledger), opts);
    p.start();
    for (int i = 0; i < 4; ++i) co_await p.submit(spec_for(i));
    co_await p.drain();
  });
  const auto start = tracer.begin();
  const auto trace = tracer.end(start);
  CHECK(trace.at("traceEvents").as_array().empty());
}

TEST_CASE("queues serve higher priority first; a requeued job goes back into its stage's queue" * doctest::timeout(60)) {
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    std::vector<std::string> order;  // the stage's runs, in order
    std::map<std::string, int> runs;
    AsyncEvent gate;
    // One worker: the first job holds it until the gate opens, so the others queue behind it.
    StageFn stage = [&](Job& job) -> asio::awaitable<void> {
      order.push_back(job.id());
      if (job.id() == "first") co_await gate.wait(asio::use_awaitable);
      if (job.id() == "bounce" && ++runs[job.id()] == 1) job.request_requeue();  // like a preempted job
    };
    std::vector<StageSpec> stages{{"only", 1, 8, stage}};
    Pipeline p(io.get_executor(), std::move(stages));
    p.start();
    auto first = p.try_submit(boost::json::object{}, "first");
    while (order.empty()) co_await sleep_for(100us);  // the worker holds it
    auto bounce = p.try_submit(boost::json::object{{"priority", 1}}, "bounce");
    auto low = p.try_submit(boost::json::object{}, "low");
    auto high = p.try_submit(boost::json::object{{"priority", 9}}, "high");
    CHECK(p.waiting_above("only", 0) == 2);
    CHECK(p.waiting_above("only", 1) == 1);
    CHECK(p.waiting_above("nothing", 0) == 0);
    gate.set();
    co_await p.drain();
    // high, then bounce (requeued, and still ahead of the older low one by its priority), then low.
    CHECK(order == std::vector<std::string>{"first", "high", "bounce", "bounce", "low"});
    CHECK(p.counts().done == 4);
  });
}

TEST_CASE("a requeued job is queued again: a cancel ends it at once" * doctest::timeout(60)) {
  run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    AsyncEvent gate, bounce_gate;
    std::map<std::string, int> runs;
    // Two workers: "hold" and then "hold-2" keep them, "bounce" runs once and goes back.
    StageFn stage = [&](Job& job) -> asio::awaitable<void> {
      ++runs[job.id()];
      if (job.id() == "bounce") {
        co_await bounce_gate.wait(asio::use_awaitable);
        job.request_requeue();
      } else {
        co_await gate.wait(asio::use_awaitable);
      }
    };
    std::vector<StageSpec> stages{{"only", 2, 8, stage}};
    Pipeline p(io.get_executor(), std::move(stages));
    p.start();
    auto hold = p.try_submit(boost::json::object{{"priority", 9}}, "hold");
    auto bounce = p.try_submit(boost::json::object{{"priority", 1}}, "bounce");
    while (runs.size() < 2) co_await sleep_for(100us);
    auto hold2 = p.try_submit(boost::json::object{{"priority", 9}}, "hold-2");
    bounce_gate.set();
    while (runs.size() < 3) co_await sleep_for(100us);  // bounce's worker took hold-2 instead
    CHECK(bounce->state() == JobState::queued);
    CHECK(p.cancel("bounce"));
    CHECK(bounce->state() == JobState::cancelled);  // at once, not when a worker frees
    gate.set();
    co_await p.drain();
    CHECK(runs["bounce"] == 1);
    CHECK(p.counts().done == 2);
    CHECK(p.counts().cancelled == 1);
  });
}
