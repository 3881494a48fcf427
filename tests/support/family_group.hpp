// Test support: one denoise group run through a family on the calling thread, the way
// stages/denoise_loop.cpp runs it (prepare, one scheduler, begin_denoise, predict + step per
// timestep, decode), for parity and batched-vs-solo checks, and a job joining a running
// group (run_joined). Header-only; not thread-safe.
// Include after <doctest/doctest.h> and a family header; undefine LibTorch's CHECK first.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <utility>
#include <vector>

#include "stages/family.hpp"

namespace vgen::test {

// Returns each job's latents after every step ([job][step]) and leaves the frames in each job.
template <class JobT = FamilyJob>  // the default serves a braced list of jobs
std::vector<std::vector<at::Tensor>> run_group(Family& family, const std::vector<std::shared_ptr<JobT>>& jobs) {
  std::vector<FamilyJob*> group;
  for (auto& j : jobs) group.push_back(j.get());
  family.prepare("cpu", group);
  auto scheduler = family.make_scheduler(*group.front());
  for (auto* j : group) REQUIRE(family.denoise_key(*j, *scheduler) == family.denoise_key(*group.front(), *scheduler));
  family.begin_denoise(group, "cpu");
  std::vector<at::Tensor> noise;
  for (auto* j : group) noise.push_back(j->state.latents * scheduler->init_noise_sigma());
  auto latents = at::cat(noise, 0);
  std::vector<std::vector<at::Tensor>> steps(jobs.size());
  const auto n = static_cast<int>(scheduler->timesteps().size(0));
  for (int i = 0; i < n; ++i) {
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
// stages/denoise_loop.cpp admits a joiner: prepared then, its own scheduler (a cohort of its
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

}  // namespace vgen::test
