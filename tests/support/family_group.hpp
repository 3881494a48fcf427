// Test support: one denoise group run through a family on the calling thread, the way
// stages/denoise_loop.cpp runs it (prepare, one scheduler, begin_denoise, predict + step per
// timestep, decode), for parity and batched-vs-solo checks. Header-only; not thread-safe.
// Include after <doctest/doctest.h> and a family header; undefine LibTorch's CHECK first.
#pragma once

#include <ATen/ATen.h>

#include <memory>
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

// The largest absolute difference of two tensors of one shape, in double.
inline double max_diff(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace vgen::test
