// StepCache: one job's decision, step by step, whether the denoiser must run or the change it
// made at its last call can be reused (an EasyCache-style, model-agnostic step cache: it sees
// only each step's model input x and the family's guided prediction, never the model).
//
// After each real call at step t with input x_t and prediction v_t it keeps the change
// d = v_t - x_t and, from the previous real call, the transformation rate
//   k = mean|v_t - v_s| / mean|x_t - x_s|.
// At a later step i it estimates the prediction's relative change from the input's,
//   e_i = k * mean|x_i - x_{i-1}| / mean|v_t|,
// accumulates E += e_i, and reuses (prediction = x_i + d) while E < threshold; otherwise it
// calls the denoiser and E restarts at 0. The first warm-up steps (10 % of the steps, at
// least 2, so that k is known) and the last step always call the denoiser. threshold 0 turns
// the cache off (every step calls).
//
// A value type, kept per member by the step loop (Batcher::Member::cache; not in StepState, so
// checkpoints skip step-cached jobs: stages/checkpoint.hpp). Its
// tensors are [1, ...] rows it owns (never views into a group's batch) and are replaced, never
// written in place, so copies share them safely. Not thread-safe; used by the step loop on
// the compute thread. Nothing blocks; nothing is cancellable.
#pragma once

#include <ATen/core/Tensor.h>

namespace vgen {

class StepCache {
 public:
  StepCache() = default;
  explicit StepCache(double threshold) : threshold_(threshold) {}

  double threshold() const noexcept { return threshold_; }
  bool enabled() const noexcept { return threshold_ > 0.0; }

  // Whether step `step` of `steps` must call the denoiser for this job's input row `x`
  // ([1, ...], the scheduler-scaled latents). Call once per step, in order; when it returns
  // false the caller uses reuse(x) as the prediction.
  bool needs_call(int step, int steps, const at::Tensor& x);
  // The prediction for a skipped step: x + the change the last call made.
  at::Tensor reuse(const at::Tensor& x);
  // After a call at this step: its input row and the family's prediction row.
  void record(const at::Tensor& x, const at::Tensor& prediction);

  int skipped() const noexcept { return skipped_; }
  int calls() const noexcept { return calls_; }
  // Steps that always call the denoiser at the start of a run of `steps`.
  static int warmup_steps(int steps);

 private:
  double threshold_ = 0.0;
  at::Tensor last_x_;          // the previous step's input (called or not)
  at::Tensor called_x_;        // the input and prediction of the last call
  at::Tensor called_v_;
  at::Tensor delta_;           // called_v_ - called_x_
  at::ScalarType dtype_ = at::kFloat;  // the family's prediction dtype
  double rate_ = -1.0;         // k; < 0 until two calls were seen
  double accumulated_ = 0.0;   // E since the last call
  int skipped_ = 0;
  int calls_ = 0;
};

}  // namespace vgen
