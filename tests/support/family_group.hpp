// Test support: one denoise group run through a family on the calling thread, the way
// stages/exec/denoise_loop.cpp runs it (prepare, one scheduler, begin_denoise, predict + step per
// timestep, decode), for parity and batched-vs-solo checks, and a job joining a running
// group (run_joined). Header-only; not thread-safe.
// Include after <doctest/doctest.h> and a family header; undefine LibTorch's CHECK first.
#pragma once

#include "runtime/device_pool.hpp"
#include "runtime/executor.hpp"
#include "runtime/job.hpp"
#include "stages/exec/batcher.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <future>
#include <mutex>
#include <ATen/ATen.h>

#include <memory>
#include <utility>
#include <algorithm>
#include <vector>

#include "stages/families/family.hpp"

namespace vgen::test {

// Returns each job's latents after every step it ran ([job][step]) and leaves the frames in each
// job. Jobs that prepare() leaves at a later step (video-to-video: state.step = t_start, all the
// group's at the same one) start there with their scheduler rows restored, as the loop's
// cohorts start them; otherwise from step 0 with the noise scaled by init_noise_sigma.
template <class JobT = FamilyJob>  // the default serves a braced list of jobs
std::vector<std::vector<at::Tensor>> run_group(Family& family, const std::vector<std::shared_ptr<JobT>>& jobs) {
  std::vector<FamilyJob*> group;
  for (auto& j : jobs) group.push_back(j.get());
  family.prepare("cpu", group);
  auto scheduler = family.make_scheduler(*group.front());
  const int first = group.front()->state.step;
  std::vector<const SchedulerRowState*> rows;
  std::vector<at::Tensor> start;
  for (auto* j : group) {
    REQUIRE(j->state.step == first);
    REQUIRE(family.denoise_key(*j, *scheduler) == family.denoise_key(*group.front(), *scheduler));
    rows.push_back(&j->state.scheduler);
    start.push_back(first == 0 ? j->state.latents * scheduler->init_noise_sigma() : j->state.latents);
  }
  if (first > 0) scheduler->restore_rows(first, rows);
  family.begin_denoise(group, "cpu");
  auto latents = at::cat(start, 0);
  std::vector<std::vector<at::Tensor>> steps(jobs.size());
  const auto n = static_cast<int>(scheduler->timesteps().size(0));
  for (int i = first; i < n; ++i) {
    auto x = scheduler->scale_model_input(latents, i);
    auto pred = family.predict(PredictCall{group, x, scheduler->timesteps()[i], "cpu"});
    latents = scheduler->step(pred, i, latents);
    for (std::size_t j = 0; j < jobs.size(); ++j) steps[j].push_back(latents.narrow(0, static_cast<std::int64_t>(j), 1).clone());
  }
  for (std::size_t j = 0; j < jobs.size(); ++j) group[j]->state.latents = steps[j].back();
  family.decode("cpu", group);
  return steps;
}

// `late` joins `first`'s running group after `join_at` of first's steps, as
// stages/exec/denoise_loop.cpp admits a joiner: prepared then, its own scheduler (a cohort of its
// own), begin_denoise again for both, and from there one predict call per step for both rows,
// each with its own timestep (so the rows may be at different steps, and for a two-expert
// package use different experts). The job left alone runs on by itself. Returns each job's
// latents after every one of its steps ({first, late}) and leaves the frames in both.
template <class JobT>
std::vector<std::vector<at::Tensor>> run_joined(Family& family, const std::shared_ptr<JobT>& first,
                                                const std::shared_ptr<JobT>& late, int join_at) {
  struct Cohort {
    FamilyJob* job;
    std::unique_ptr<Scheduler> scheduler;
    at::Tensor latents;
    int step = 0;
    std::vector<at::Tensor> steps;
    bool done() const { return step >= static_cast<int>(scheduler->timesteps().size(0)); }
  };
  auto start = [&family](FamilyJob* job) {
    family.prepare("cpu", {job});
    Cohort c{job, family.make_scheduler(*job), {}, 0, {}};
    c.latents = job->state.latents * c.scheduler->init_noise_sigma();
    return c;
  };
  std::vector<Cohort> cohorts;
  cohorts.push_back(start(first.get()));
  family.begin_denoise({first.get()}, "cpu");
  while (!cohorts[0].done() || (cohorts.size() > 1 && !cohorts[1].done())) {
    if (cohorts.size() == 1 && cohorts[0].step == join_at) {
      cohorts.push_back(start(late.get()));
      REQUIRE(family.denoise_key(*late, *cohorts[1].scheduler) == family.denoise_key(*first, *cohorts[0].scheduler));
      family.begin_denoise({first.get(), late.get()}, "cpu");
    }
    std::vector<FamilyJob*> jobs;
    std::vector<at::Tensor> xs, ts;
    std::vector<Cohort*> live;
    for (auto& c : cohorts) {
      if (c.done()) continue;
      live.push_back(&c);
      jobs.push_back(c.job);
      xs.push_back(c.scheduler->scale_model_input(c.latents, c.step));
      ts.push_back(c.scheduler->timesteps()[c.step].reshape({1}));
    }
    const auto x = at::cat(xs, 0), t = at::cat(ts, 0).contiguous();
    const auto pred = family.predict(PredictCall{jobs, x, t, "cpu"});
    for (std::size_t r = 0; r < live.size(); ++r) {
      auto& c = *live[r];
      c.latents = c.scheduler->step(pred.narrow(0, static_cast<std::int64_t>(r), 1), c.step, c.latents);
      c.steps.push_back(c.latents.clone());
      ++c.step;
    }
  }
  REQUIRE(cohorts.size() == 2);  // join_at is within first's steps
  for (auto& c : cohorts) c.job->state.latents = c.latents;
  family.decode("cpu", {first.get()});
  family.decode("cpu", {late.get()});
  return {std::move(cohorts[0].steps), std::move(cohorts[1].steps)};
}

// The largest absolute difference of two tensors of one shape, in double.
inline double max_diff(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// The worst max_diff over every step's latents of two runs of one job.
inline double worst_step(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, max_diff(a[i], b[i]));
  return worst;
}

// Runs `together` as one group, then each job again alone (`make_solo(j)` makes job j anew), and
// checks every step's latents and the frames of each against its solo run within `tolerance`.
template <class JobT, class MakeSolo>
void check_batched_matches_solo(Family& family, const std::vector<std::shared_ptr<JobT>>& together, MakeSolo make_solo,
                                double tolerance = 1e-4) {
  const auto batched = run_group(family, together);
  for (std::size_t j = 0; j < together.size(); ++j) {
    const std::shared_ptr<JobT> solo_job = make_solo(j);
    const auto solo = run_group(family, std::vector<std::shared_ptr<JobT>>{solo_job});
    const double worst = worst_step(batched[j], solo[0]);
    const double frames = max_diff(together[j]->frames, solo_job->frames);
    MESSAGE("job " << j << ": batched vs solo latents " << worst << ", frames " << frames);
    DOCTEST_CHECK(worst <= tolerance);
    DOCTEST_CHECK(frames <= tolerance);
  }
}

namespace detail {
// Submits `job` to the batcher's denoise stage; says so first (see run_joined_batcher).
inline boost::asio::awaitable<void> join_denoise(std::shared_ptr<Batcher> batcher, std::shared_ptr<Family> family,
                                                 std::shared_ptr<Job> job, std::shared_ptr<std::promise<void>> started) {
  started->set_value();
  co_await batcher->join(std::move(family), *job, BatchKind::denoise);
}
}  // namespace detail

// `late` joins a running denoise group: `first` starts alone in a Batcher group (max_batch 2,
// one CPU device, stages/exec/denoise_loop: per-row timesteps, a cohort and scheduler per join
// step); after its step `at` (> 0) `late` is submitted to the denoise stage and is admitted at
// the group's next step boundary. With one io thread this is deterministic: first's on_step
// (compute thread) waits until late's join has run up to its first suspension, which queues it
// in the running group before the loop's next boundary can run on that thread. Both jobs are
// prepared alone before and decoded alone after. CHECKs one denoise group (late joined the
// running one) and REQUIREs that late made its first step beside one of first's; returns how
// many steps first had made before that call (== at when admitted at the next boundary).
template <class JobT>
int run_joined_batcher(const std::shared_ptr<Family>& family, const std::shared_ptr<JobT>& first, const std::shared_ptr<JobT>& late, int at) {
  DOCTEST_REQUIRE(at > 0);
  Executor executor{{.io_threads = 1}};
  const auto specs = parse_device_list("cpu");
  DevicePool devices(specs);
  add_device_pools(executor, specs);
  auto batcher = std::make_shared<Batcher>(
      BatcherOptions{.batching = {.max_batch = 2, .wait = std::chrono::milliseconds(0)}, .executor = &executor, .devices = &devices});
  for (FamilyJob* j : {static_cast<FamilyJob*>(first.get()), static_cast<FamilyJob*>(late.get())}) {
    family->prepare("cpu", {j});
    j->device = "cpu";
  }
  auto job_a = std::make_shared<Job>("first", boost::json::object{});
  auto job_b = std::make_shared<Job>("late", boost::json::object{});
  job_a->payload = std::shared_ptr<FamilyJob>(first);  // family_job() reads exactly this type
  job_b->payload = std::shared_ptr<FamilyJob>(late);
  std::mutex m;
  int first_steps = 0, joined_at = -1;
  std::future<void> late_done;
  first->on_step = [&](int i, const at::Tensor&) {
    {
      std::lock_guard lock(m);
      first_steps = i + 1;
    }
    if (i + 1 != at) return;
    auto started = std::make_shared<std::promise<void>>();
    auto queued = started->get_future();
    late_done = boost::asio::co_spawn(executor.get_executor(), detail::join_denoise(batcher, family, job_b, started),
                                      boost::asio::use_future);
    queued.wait();
  };
  // In one call first's cohort (older) steps before late's, so at late's first step first_steps
  // already counts the step first made in that same call.
  late->on_step = [&](int i, const at::Tensor&) {
    std::lock_guard lock(m);
    if (i == 0) joined_at = first_steps - 1;
  };
  executor.run_sync(batcher->join(family, *job_a, BatchKind::denoise));
  DOCTEST_REQUIRE(late_done.valid());
  late_done.get();
  executor.stop();
  first->on_step = nullptr;
  late->on_step = nullptr;
  const auto groups = batcher->group_sizes(BatchKind::denoise);
  DOCTEST_CHECK((groups == std::map<std::size_t, std::uint64_t>{{1, 1}}));  // one group: late joined it
  const auto first_total = static_cast<int>(family->make_scheduler(*first)->timesteps().size(0));
  DOCTEST_REQUIRE(joined_at >= at);
  DOCTEST_REQUIRE(joined_at < first_total);
  family->decode("cpu", {first.get()});
  family->decode("cpu", {late.get()});
  return joined_at;
}

// The joined-batch check of issue 20: make(0) and make(1) build fresh jobs (first, late) of
// `family`; late joins first's running group after step `at` (run_joined_batcher); each then runs alone
// (run_group). CHECKs both jobs' final latents and decoded frames within 1e-4 of their solo
// runs, and that the two jobs differ (rows were not mixed up); MESSAGEs the diffs under `name`.
template <class Make>
void check_joined_equals_solo(const std::shared_ptr<Family>& family, Make make, int at, const std::string& name) {
  auto first = make(0), late = make(1);
  const int joined_at = run_joined_batcher(family, first, late, at);
  decltype(first) solo[] = {make(0), make(1)};
  for (auto& s : solo) run_group(*family, {s});
  const decltype(first) joined[] = {first, late};
  for (int j = 0; j < 2; ++j) {
    const double latents = max_diff(joined[j]->state.latents, solo[j]->state.latents);
    const double frames = max_diff(joined[j]->frames, solo[j]->frames);
    DOCTEST_MESSAGE(name << (j ? ": late job (joined at step " + std::to_string(joined_at) + ")" : std::string(": first job"))
                 << " joined vs solo: final latents " << latents << ", frames " << frames);
    DOCTEST_CHECK(latents <= 1e-4);
    DOCTEST_CHECK(frames <= 1e-4);
  }
  DOCTEST_CHECK(max_diff(first->frames, late->frames) > 1e-3);
}


}  // namespace vgen::test
