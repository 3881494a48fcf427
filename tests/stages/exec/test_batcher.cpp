#include "stages/exec/batcher.hpp"

#include "stages/exec/denoise_news.hpp"

#include <doctest/doctest.h>

#include <mutex>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <future>
#include <set>

#include "runtime/errors.hpp"
#include "runtime/pipeline.hpp"
#include "tests/support/async_test.hpp"
#include "tests/support/fake_family.hpp"
#include "tests/stages/exec/batcher_bench.hpp"

#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace asio = boost::asio;

using namespace vgen::batcher_test;

TEST_CASE("jobs joining while a group collects are included; the filling joiner starts it" * doctest::timeout(180)) {
  // A long wait: the group may only start early because the third job fills it.
  Bench b(3, std::chrono::seconds(120));
  auto family = test::make_fake_family("fake-a");
  std::vector<std::shared_ptr<Job>> jobs;
  for (std::uint64_t s : {1, 2, 3}) jobs.push_back(make_job(family, s));
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& e : render_all(b, of(family, jobs))) CHECK(e == nullptr);  // the first opens the group, the others join
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120));  // did not wait out the wait
  CHECK(b.batcher->group_sizes(BatchKind::denoise) == std::map<std::size_t, std::uint64_t>{{3, 1}});
  CHECK(b.batcher->group_sizes(BatchKind::preprocess) == std::map<std::size_t, std::uint64_t>{{3, 1}});
  for (std::uint64_t s : {1, 2, 3}) CHECK(at::equal(family_job(*jobs[s - 1])->state.latents, alone(s)));
  for (auto& j : jobs) CHECK(family_job(*j)->state.step == 4);
}

TEST_CASE("a job cancelled mid-group stops; the others finish as they would alone" * doctest::timeout(60)) {
  Bench b(3, std::chrono::seconds(30));
  auto family = test::make_fake_family("fake-a");
  std::vector<std::shared_ptr<Job>> jobs;
  for (std::uint64_t s : {11, 12, 13}) jobs.push_back(make_job(family, s, 6));
  // Cancel the middle job during the third denoiser call of the group.
  test::fake(*family).on_predict = [&](std::size_t call, std::size_t rows) {
    if (call == 3) {
      CHECK(rows == 3);
      jobs[1]->request_cancel();
    }
  };
  const auto errors = render_all(b, of(family, jobs));
  CHECK(errors[0] == nullptr);
  CHECK(errors[2] == nullptr);
  REQUIRE(errors[1] != nullptr);
  CHECK(classify(errors[1]) == ErrorKind::cancelled);
  CHECK(test::fake(*family).max_rows_after(3) == 2);  // later calls carried only the two live jobs
  CHECK(at::equal(family_job(*jobs[0])->state.latents, alone(11, 6)));
  CHECK(at::equal(family_job(*jobs[2])->state.latents, alone(13, 6)));
}

TEST_CASE("out of memory fails the group, halves the batch for its key, and the retry runs smaller" * doctest::timeout(60)) {
  Bench b(4, std::chrono::seconds(30));
  auto family = test::make_fake_family("fake-a");
  test::fake(*family).oom_above_rows = 2;  // a call of more than 2 jobs runs out of memory...
  test::fake(*family).oom_from_step = 2;   // ...at its third step, after two have run
  std::vector<std::shared_ptr<Job>> jobs;
  for (std::uint64_t s : {21, 22, 23, 24}) jobs.push_back(make_job(family, s));
  for (auto& e : render_all(b, of(family, jobs))) {
    REQUIRE(e != nullptr);
    CHECK(classify(e) == ErrorKind::out_of_memory);
  }
  {  // the cap is reported once, with the group's key (the auto-tuner's cache follows it)
    std::lock_guard lock(b.capped_mutex);
    REQUIRE(b.capped.size() == 1);
    CHECK(b.capped[0].first.rfind("denoise|fake-a|", 0) == 0);
    CHECK(b.capped[0].second == 2);
  }
  // A failed group leaves its jobs as they were (two steps had run): the retry starts clean.
  CHECK(test::fake(*family).max_rows_after(0) == 4);
  for (auto& j : jobs) CHECK(family_job(*j)->state.step == 0);
  // The retry (as the stage's retry policy would run it): groups of at most 2 now.
  for (auto& e : render_all(b, of(family, jobs), false)) CHECK(e == nullptr);
  const auto sizes = b.batcher->group_sizes(BatchKind::denoise);
  CHECK(sizes.at(4) == 1);
  CHECK(sizes.at(2) == 2);
  for (std::uint64_t s : {21, 22, 23, 24}) CHECK(at::equal(family_job(*jobs[s - 21])->state.latents, alone(s)));
}

TEST_CASE("jobs of different families never share a group" * doctest::timeout(60)) {
  Bench b(8, std::chrono::milliseconds(200));
  auto fa = test::make_fake_family("fake-a");
  auto fb = test::make_fake_family("fake-b");
  std::vector<std::pair<std::shared_ptr<Family>, std::shared_ptr<Job>>> jobs;
  for (std::uint64_t s = 30; s < 36; ++s) jobs.emplace_back(s % 2 ? fa : fb, make_job(s % 2 ? fa : fb, s));
  for (auto& e : render_all(b, jobs)) CHECK(e == nullptr);
  for (const auto& [key, size] : b.batcher->group_log()) {
    const bool a = key.find("fake-a|") != std::string::npos, bb = key.find("fake-b|") != std::string::npos;
    CHECK(a != bb);  // exactly one family in every key
  }
  CHECK(test::fake(*fa).max_rows_after(0) <= 3);
  CHECK(test::fake(*fb).max_rows_after(0) <= 3);
  // fake-b computes differently from fake-a: its results are its own.
  CHECK_FALSE(at::equal(family_job(*jobs[0].second)->state.latents, alone(30)));
}

TEST_CASE("out of memory moves the group whole to another device before it shrinks" * doctest::timeout(60)) {
  Bench b(3, std::chrono::seconds(30), "cpu,cpu");
  auto family = test::make_fake_family("fake-a");
  std::vector<std::shared_ptr<Job>> jobs;
  for (std::uint64_t s : {41, 42, 43}) jobs.push_back(make_job(family, s));
  // Whichever device the group lands on first runs out of memory; the other has room.
  const auto first = b.specs.front().id;
  test::fake(*family).oom_device = first;
  for (auto& e : render_all(b, of(family, jobs))) CHECK(e == nullptr);
  const auto moved = b.batcher->oom_moves();
  CHECK(b.batcher->group_sizes(BatchKind::denoise) == std::map<std::size_t, std::uint64_t>{{3, 1}});  // not halved
  for (std::uint64_t s : {41, 42, 43}) CHECK(at::equal(family_job(*jobs[s - 41])->state.latents, alone(s)));
  for (auto& j : jobs) CHECK(family_job(*j)->device != first);
  CHECK(moved >= 1);
  CHECK(b.pool.status().size() == 2);
  for (const auto& d : b.pool.status()) CHECK(d.active == 0);  // every lease returned
  // With every device out of memory there is nowhere to move: the group fails and shrinks.
  test::fake(*family).oom_device = "";
  test::fake(*family).oom_above_rows = 1;
  for (auto& e : render_all(b, of(family, jobs))) {  // prepared again: denoised jobs would go on from their last step
    REQUIRE(e != nullptr);
    CHECK(classify(e) == ErrorKind::out_of_memory);
  }
  CHECK(b.batcher->oom_moves() == moved + 1);  // tried the other device once, then gave up
  for (const auto& d : b.pool.status()) CHECK(d.active == 0);
}

namespace {

// A family stepping with UniPC (multistep: the resume must carry its history).
std::shared_ptr<Family> unipc_family() {
  auto family = test::make_fake_family("fake-a");
  test::fake(*family).scheduler_name = "UniPCMultistepScheduler";
  test::fake(*family).scheduler_params = {{"use_flow_sigmas", true}, {"prediction_type", std::string("flow_prediction")},
                                          {"flow_shift", 3.0}};
  return family;
}

// A deep copy of a job's step state, as a checkpoint file holds it.
StepState copy_state(const StepState& s) {
  StepState c{s.step, s.latents.clone(), {}, 0};
  for (const auto& t : s.scheduler.tensors) c.scheduler.tensors.push_back(t.defined() ? t.clone() : t);
  c.scheduler.counters = s.scheduler.counters;
  return c;
}

}  // namespace

TEST_CASE("a job resumed from its state after step k ends bit-identical to the uninterrupted run, alone and grouped" *
          doctest::timeout(120)) {
  const int steps = 8;
  for (int k : {1, 3, 6}) {
    CAPTURE(k);
    // Uninterrupted: two jobs in one group, with their states after step k kept.
    Bench full(2, std::chrono::seconds(30));
    auto family = unipc_family();
    std::vector<std::shared_ptr<Job>> jobs{make_job(family, 41, steps), make_job(family, 42, steps)};
    std::map<std::string, StepState> saved;
    for (auto& j : jobs) {
      auto w = family_job(*j);
      w->on_step = [w, k, &saved](int i, const at::Tensor&) {
        if (i + 1 == k) saved[w->spec.prompt] = copy_state(w->state);
      };
    }
    for (auto& e : render_all(full, of(family, jobs))) CHECK(e == nullptr);
    REQUIRE(saved.size() == 2);
    CHECK(saved["p41"].scheduler.tensors.size() == 3);  // UniPC order 2: two outputs + the last sample

    // Resumed together (a new process, a new family instance): same group, same numbers.
    Bench again(2, std::chrono::seconds(30));
    auto family2 = unipc_family();
    std::vector<std::shared_ptr<Job>> resumed{make_job(family2, 41, steps), make_job(family2, 42, steps)};
    for (auto& j : resumed) {
      auto w = family_job(*j);
      w->state = copy_state(saved[w->spec.prompt]);
    }
    for (auto& e : render_all(again, of(family2, resumed), false)) CHECK(e == nullptr);
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(at::equal(family_job(*resumed[i])->state.latents, family_job(*jobs[i])->state.latents));
      CHECK(family_job(*resumed[i])->state.step == steps);
    }
    CHECK(test::fake(*family2).max_rows_after(0) == 2);
    CHECK(test::fake(*family2).predicted("") == 2 * (steps - k));  // only the remaining steps ran

    // Resumed alone: the same within float rounding of a smaller batch.
    Bench solo(1, std::chrono::milliseconds(0));
    auto family3 = unipc_family();
    auto one = make_job(family3, 42, steps);
    family_job(*one)->state = copy_state(saved["p42"]);
    for (auto& e : render_all(solo, of(family3, {one}), false)) CHECK(e == nullptr);
    CHECK((family_job(*one)->state.latents - family_job(*jobs[1])->state.latents).abs().max().item<float>() <= 1e-6f);
  }
}

TEST_CASE("jobs at different steps never share a denoise group" * doctest::timeout(60)) {
  auto family = unipc_family();
  // The state of job 51 after two of its six steps, and its uninterrupted result.
  Bench first(1, std::chrono::milliseconds(0));
  auto src = make_job(family, 51, 6);
  StepState at2;
  family_job(*src)->on_step = [&](int i, const at::Tensor&) {
    if (i == 1) at2 = copy_state(family_job(*src)->state);
  };
  for (auto& e : render_all(first, of(family, {src}))) CHECK(e == nullptr);
  REQUIRE(at2.step == 2);

  // A fresh job and the resumed one arrive together; a long wait and room for both.
  Bench b(4, std::chrono::milliseconds(300));
  auto fresh = make_job(family, 52, 6);
  family->prepare("cpu", {family_job(*fresh).get()});
  auto resumed = make_job(family, 51, 6);
  family_job(*resumed)->state = copy_state(at2);
  for (auto& e : render_all(b, of(family, {fresh, resumed}), false)) CHECK(e == nullptr);
  const auto log = b.batcher->group_log();
  REQUIRE(log.size() == 2);
  CHECK(log[0].second == 1);
  CHECK(log[1].second == 1);
  CHECK(log[0].first != log[1].first);
  CHECK(((log[0].first.find("from step 2") != std::string::npos) != (log[1].first.find("from step 2") != std::string::npos)));
  CHECK(at::equal(family_job(*resumed)->state.latents, family_job(*src)->state.latents));
}

namespace {

std::shared_ptr<Job> named_job(const std::shared_ptr<Family>& family, std::uint64_t seed, int steps, const std::string& name,
                               double step_cache = 0.0) {
  boost::json::object spec{{"prompt", "p" + std::to_string(seed)}, {"seed", seed}, {"steps", steps}, {"name", name}};
  if (step_cache > 0) spec["step_cache"] = step_cache;
  auto job = std::make_shared<Job>("job-" + name, spec);
  job->payload = family->create_job(family->validate(spec));
  return job;
}

// A job's final latents rendered alone with `family_of()`'s family.
at::Tensor solo_latents(const std::function<std::shared_ptr<Family>()>& family_of, std::uint64_t seed, int steps, double cache = 0.0) {
  Bench b(1, std::chrono::milliseconds(0));
  auto family = family_of();
  auto job = named_job(family, seed, steps, "solo", cache);
  for (auto& e : render_all(b, of(family, {job}))) REQUIRE(e == nullptr);
  return family_job(*job)->state.latents.clone();
}

}  // namespace

TEST_CASE("a job submitted mid-denoise joins the running group at the next step; both end as they would alone" *
          doctest::timeout(60)) {
  const int steps = 10;
  Bench b(4, std::chrono::milliseconds(0));
  auto family = unipc_family();  // multistep: each cohort keeps its own history
  auto first = named_job(family, 61, steps, "a");
  auto late = named_job(family, 62, steps, "b");
  std::mutex m;
  std::vector<std::size_t> rows_per_call;
  std::future<std::exception_ptr> late_done;
  std::atomic<bool> spawned{false};
  test::fake(*family).on_predict = [&](std::size_t call, std::size_t rows) {
    std::lock_guard lock(m);
    rows_per_call.push_back(rows);
    if (call == 3 && !spawned.exchange(true))  // arrives while the group is at its third step
      late_done = asio::co_spawn(b.executor.get_executor(), render(*b.batcher, family, late), asio::use_future);
  };
  for (auto& e : render_all(b, of(family, {first}))) CHECK(e == nullptr);
  REQUIRE(spawned.load());
  CHECK(late_done.get() == nullptr);
  // One denoise group: the late job was prepared between the group's steps and joined it.
  CHECK(b.batcher->group_sizes(BatchKind::denoise) == std::map<std::size_t, std::uint64_t>{{1, 1}});
  std::size_t joined_at = 0;
  for (std::size_t i = 0; i < rows_per_call.size() && !joined_at; ++i)
    if (rows_per_call[i] == 2) joined_at = i + 1;
  CAPTURE(rows_per_call);
  CHECK(joined_at >= 4);
  CHECK(joined_at <= 5);  // within two step times of its arrival, not after the group's 10 steps
  CHECK(rows_per_call.size() == steps + joined_at - 1);  // b ran its own 10 steps from there
  CHECK(test::fake(*family).predicted("a") == steps);
  CHECK(test::fake(*family).predicted("b") == steps);
  const auto alone_a = solo_latents(unipc_family, 61, steps), alone_b = solo_latents(unipc_family, 62, steps);
  CHECK((family_job(*first)->state.latents - alone_a).abs().max().item<float>() <= 1e-6f);
  CHECK((family_job(*late)->state.latents - alone_b).abs().max().item<float>() <= 1e-6f);
}

TEST_CASE("with join_running off, a job submitted mid-denoise waits for the next group (batching before joining)" *
          doctest::timeout(60)) {
  const int steps = 6;
  Bench b(4, std::chrono::milliseconds(0), "cpu", /*join_running=*/false);
  auto family = unipc_family();
  auto first = named_job(family, 61, steps, "a");
  auto late = named_job(family, 62, steps, "b");
  std::mutex m;
  std::vector<std::size_t> rows_per_call;
  std::future<std::exception_ptr> late_done;
  std::atomic<bool> spawned{false};
  test::fake(*family).on_predict = [&](std::size_t call, std::size_t rows) {
    std::lock_guard lock(m);
    rows_per_call.push_back(rows);
    if (call == 2 && !spawned.exchange(true))
      late_done = asio::co_spawn(b.executor.get_executor(), render(*b.batcher, family, late), asio::use_future);
  };
  for (auto& e : render_all(b, of(family, {first}))) CHECK(e == nullptr);
  REQUIRE(spawned.load());
  CHECK(late_done.get() == nullptr);
  // Two groups of one, one after the other: never a call with both rows.
  CHECK(b.batcher->group_sizes(BatchKind::denoise) == std::map<std::size_t, std::uint64_t>{{1, 2}});
  CAPTURE(rows_per_call);
  CHECK(rows_per_call == std::vector<std::size_t>(2 * steps, 1));
  CHECK((family_job(*late)->state.latents - solo_latents(unipc_family, 62, steps)).abs().max().item<float>() <= 1e-6f);
}

TEST_CASE("the step cache sends only the rows that need the call to the denoiser" * doctest::timeout(60)) {
  const int steps = 20;
  auto flow = [] { return test::make_fake_family("fake-a"); };
  Bench b(2, std::chrono::seconds(30));
  auto family = flow();
  auto cached = named_job(family, 71, steps, "cached", 0.5);
  auto plain = named_job(family, 72, steps, "plain");
  for (auto& e : render_all(b, of(family, {cached, plain}))) CHECK(e == nullptr);
  CHECK(b.batcher->group_sizes(BatchKind::denoise) == std::map<std::size_t, std::uint64_t>{{2, 1}});
  const int calls = test::fake(*family).predicted("cached");
  CHECK(calls >= StepCache::warmup_steps(steps) + 1);  // the warm-up and the last step always run
  CHECK(calls < steps);
  CHECK(test::fake(*family).predicted("plain") == steps);
  CHECK(test::fake(*family).max_rows_after(StepCache::warmup_steps(steps)) == 2);
  // The uncached job is untouched by its neighbour's cache; the cached one is close to uncached
  // and the same as the cached job alone.
  CHECK(at::equal(family_job(*plain)->state.latents, solo_latents(flow, 72, steps)));
  const auto exact = solo_latents(flow, 71, steps);
  const auto got = family_job(*cached)->state.latents;
  const double rel = ((got - exact).abs().max() / exact.abs().max()).item<double>();
  MESSAGE("step cache 0.5 on the fake family: ", calls, " of ", steps, " calls, max relative error ", rel);
  CHECK(rel < 0.1);
  CHECK(at::equal(got, solo_latents(flow, 71, steps, 0.5)));
}

namespace {

asio::awaitable<void> prepare_stage(std::shared_ptr<Batcher> batcher, std::shared_ptr<Family> family, Job& job) {
  job.payload = family->create_job(family->validate(job.spec()));
  co_await batcher->join(family, job, BatchKind::preprocess);
}

asio::awaitable<void> denoise_stage(std::shared_ptr<Batcher> batcher, std::shared_ptr<Family> family, Job& job) {
  co_await batcher->join(family, job, BatchKind::denoise);
}

// ModelSet's preprocess and denoise stages over one device, in a Pipeline: max_batch workers
// each, queues with room for every job, the denoise queue as the batcher's waiting probe.
// Records each job's scheduling in the order it happened.
struct Service {
  Bench bench;
  std::shared_ptr<Family> family;
  std::unique_ptr<Pipeline> pipeline;
  std::mutex mutex;
  std::vector<std::string> log;  // "<id> entered|admitted|preempted|resumed|done|failed|cancelled"
  std::set<std::string> started;

  Service(std::size_t max_batch, std::shared_ptr<Family> f) : bench(max_batch, std::chrono::milliseconds(0)), family(std::move(f)) {
    auto b = bench.batcher;
    auto fam = family;
    std::vector<StageSpec> stages{
        {"preprocess", max_batch, 32, [b, fam](Job& job) { return prepare_stage(b, fam, job); }},
        {"denoise", max_batch, 32, [b, fam](Job& job) { return denoise_stage(b, fam, job); }}};
    PipelineOptions po;
    po.on_event = [this](const JobEvent& e) {
      std::lock_guard lock(mutex);
      if (const auto news = scheduling_event(e); !news.empty()) log.push_back(e.job_id + " " + news);
      else if (is_terminal(e.state)) log.push_back(e.job_id + " " + std::string(to_string(e.state)));
      else if (e.status() == "denoise" && e.total == 0 && started.insert(e.job_id).second)
        log.push_back(e.job_id + " entered");  // a denoise worker took it (the first time)
    };
    pipeline = std::make_unique<Pipeline>(bench.executor.get_executor(), std::move(stages), std::move(po));
    b->set_waiting_probe([p = pipeline.get()](int priority) { return p->waiting_above("denoise", priority); });
    pipeline->start();
  }
  std::shared_ptr<Job> submit(const std::string& id, std::uint64_t seed, int steps, int priority, double step_cache = 0) {
    boost::json::object spec{{"prompt", "p" + std::to_string(seed)}, {"seed", seed}, {"steps", steps}, {"name", id}};
    if (priority != 0) spec["priority"] = priority;
    if (step_cache > 0) spec["step_cache"] = step_cache;
    return pipeline->try_submit(spec, id);
  }
  std::ptrdiff_t at(const std::string& entry) {
    std::lock_guard lock(mutex);
    const auto it = std::find(log.begin(), log.end(), entry);
    return it == log.end() ? -1 : it - log.begin();
  }
};

}  // namespace

TEST_CASE("a high-priority job preempts a busy device at a step boundary; preempted jobs end identical" *
          doctest::timeout(120)) {
  const int steps = 12;
  std::function<std::shared_ptr<Family>()> flow = [] { return test::make_fake_family("fake-a"); };
  for (const auto& [name, family_of] : {std::pair{"euler", flow}, std::pair{"unipc", std::function(unipc_family)}}) {
    CAPTURE(std::string(name));
    Service svc(2, family_of());
    std::vector<std::shared_ptr<Job>> low;
    std::shared_ptr<Job> high;
    std::promise<std::ptrdiff_t> submitted;  // the log's length when the high job came
    std::atomic<bool> sent{false};
    test::fake(*svc.family).on_predict = [&](std::size_t call, std::size_t rows) {
      if (call < 3 || rows != 2 || sent.exchange(true)) return;  // low-1 and low-2 share the running group
      std::ptrdiff_t n;
      {
        std::lock_guard lock(svc.mutex);
        n = static_cast<std::ptrdiff_t>(svc.log.size());
      }
      high = svc.submit("high", 100, steps, 5);
      submitted.set_value(n);
    };
    for (int i = 1; i <= 8; ++i) low.push_back(svc.submit("low-" + std::to_string(i), static_cast<std::uint64_t>(i), steps, 0));
    const auto when = submitted.get_future().get();
    svc.bench.executor.run_sync(svc.pipeline->drain());
    CAPTURE(svc.log);
    CHECK(svc.pipeline->counts().done == 9);
    const auto high_done = svc.at("high done");
    REQUIRE(high_done >= 0);
    // Every low job that had not started when the high one came starts after it has finished.
    int waited = 0;
    for (const auto& j : low) {
      const auto s = svc.at(j->id() + " entered");
      REQUIRE(s >= 0);
      if (s < when) continue;
      ++waited;
      CHECK(s > high_done);
    }
    CHECK(waited >= 6);
    // It did not wait for the running group: a low row left at a step boundary and the high job
    // took its place, and the preempted job went on later from its step.
    CHECK(svc.bench.batcher->preemptions() >= 1);
    CHECK(svc.at("high admitted") > svc.at("low-2 preempted"));
    CHECK(svc.at("low-2 preempted") >= 0);  // the newest of the equal-priority rows
    CHECK(svc.at("low-1 preempted") == -1);
    CHECK(svc.at("low-2 resumed") > svc.at("low-2 preempted"));
    CHECK(preemptions(low[1]->snapshot()) == 1);
    CHECK(test::fake(*svc.family).predicted("low-2") == steps);  // no step ran twice
    // Every job's result is that of the job alone, bit for bit.
    for (std::size_t i = 0; i < low.size(); ++i) {
      CAPTURE(i);
      CHECK(at::equal(family_job(*low[i])->state.latents, solo_latents(family_of, i + 1, steps)));
    }
    CHECK(at::equal(family_job(*high)->state.latents, solo_latents(family_of, 100, steps)));
  }
}

TEST_CASE("equal priorities never preempt; a step-cached job is never preempted" * doctest::timeout(120)) {
  const int steps = 8;
  {
    Service svc(2, test::make_fake_family("fake-a"));
    for (int i = 1; i <= 4; ++i) svc.submit("eq-" + std::to_string(i), static_cast<std::uint64_t>(i), steps, 0);
    svc.bench.executor.run_sync(svc.pipeline->drain());
    CHECK(svc.pipeline->counts().done == 4);
    CHECK(svc.bench.batcher->preemptions() == 0);
  }
  // Its cache state is not part of StepState: leaving would change its result, so it stays.
  auto flow = [] { return test::make_fake_family("fake-a"); };
  Service svc(1, flow());
  std::promise<void> sent;
  std::atomic<bool> once{false};
  test::fake(*svc.family).on_predict = [&](std::size_t call, std::size_t) {
    if (call == 3 && !once.exchange(true)) {
      svc.submit("urgent", 2, steps, 5);
      sent.set_value();
    }
  };
  auto cached = svc.submit("cached", 1, steps, 0, 0.5);
  sent.get_future().get();
  svc.bench.executor.run_sync(svc.pipeline->drain());
  CAPTURE(svc.log);
  CHECK(svc.pipeline->counts().done == 2);
  CHECK(svc.bench.batcher->preemptions() == 0);
  CHECK(svc.at("cached done") < svc.at("urgent entered"));
  CHECK(at::equal(family_job(*cached)->state.latents, solo_latents(flow, 1, steps, 0.5)));
}
