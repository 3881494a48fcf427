// Noise schedulers for diffusion sampling, chosen by name, ported from diffusers.
//
// Each scheduler reproduces one diffusers class (same name, same config keys, same numbers:
// the schedule is built with the same float32/float64 steps and the step update runs the same
// tensor operations in the same dtypes, including diffusers' float32 upcasts). Parity is
// tested against diffusers itself (tests/stages/test_scheduler.cpp,
// tools/reference/scheduler_reference.py).
//
// Use: make_scheduler(name, params) -> set_timesteps(n) -> for i in 0..n-1:
//   x_in = scale_model_input(x, i); eps = model(x_in, timesteps()[i]); x = step(eps, i, x).
//
// Ownership and threads: a Scheduler is a plain value-like object owned by one denoise group
// (stages/denoise_loop.hpp: one instance steps all of a group's jobs as one batch, since
// step() is row-wise). It is not thread-safe; multistep schedulers keep history between
// step() calls, so every group takes its own instance (make_scheduler or clone_fresh()). Nothing here blocks or is cancellable: every call is a few
// small tensor operations on the sample's device. The registry is thread-safe.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <cstdint>
#include <variant>
#include <vector>

namespace vgen {

// One config value as in diffusers' scheduler_config.json: null, bool, number, string or a
// list of numbers (e.g. disable_corrector). Integers are given as doubles.
using SchedulerParam = std::variant<std::monostate, bool, double, std::string, std::vector<double>>;
// Keys as in scheduler_config.json. Keys starting with '_' (_class_name, _diffusers_version)
// are ignored; any other key the scheduler does not know is Error(invalid_argument). Known
// keys for features not ported (Karras sigmas, thresholding, ...) are accepted only at their
// "off" value.
using SchedulerParams = std::map<std::string, SchedulerParam, std::less<>>;

// What a scheduler carries from one step to the next for ONE row (one job) of the batch it
// steps: the multistep history of UniPC (its last model outputs and sample, as [1, ...] rows)
// and its counters. With the row's latents and step index (StepState, stages/family.hpp) it
// lets a job stop after any step and go on later, in another group or another process, with
// the same numbers (checkpoints: stages/checkpoint.hpp). Memoryless schedulers carry nothing.
struct SchedulerRowState {
  std::vector<at::Tensor> tensors;      // each [1, ...] or undefined (no history yet)
  std::vector<std::int64_t> counters;   // the scheduler's own (e.g. UniPC's lower-order count)
  bool empty() const noexcept { return tensors.empty() && counters.empty(); }
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  // The diffusers class name this scheduler reproduces.
  virtual std::string_view name() const noexcept = 0;

  // Builds the schedule and clears any multistep history. Error(invalid_argument) for n < 1.
  virtual void set_timesteps(int num_inference_steps) = 0;
  int num_inference_steps() const noexcept { return num_inference_steps_; }

  // What the denoiser is conditioned on at step i (float32 or int64, as diffusers), on CPU.
  virtual const at::Tensor& timesteps() const = 0;
  // float32, num_inference_steps + 1 entries (last is the terminal sigma); undefined where
  // diffusers has none (DDIM).
  virtual const at::Tensor& sigmas() const = 0;

  // diffusers' init_noise_sigma: multiply the initial Gaussian noise by it.
  virtual double init_noise_sigma() const { return 1.0; }

  // The denoiser's input at step i (identity except for EulerDiscrete).
  virtual at::Tensor scale_model_input(const at::Tensor& sample, int step_index) const {
    (void)step_index;
    return sample;
  }

  // One denoising step from step i to i+1; returns the new sample in the model output's dtype.
  // Row-wise: a batch of samples [N, ...] stepped together gives each row what stepping it
  // alone gives (up to noise drawn by stochastic variants), so JobBatcher steps a denoise
  // group with one instance.
  // Steps must run in order 0..N-1 for multistep schedulers (else Error(invalid_argument)).
  // `gen` is used only by stochastic variants (DDIM eta > 0, stochastic_sampling); nullptr
  // means the default generator.
  virtual at::Tensor step(const at::Tensor& model_output, int step_index, const at::Tensor& sample,
                          at::Generator* gen = nullptr) = 0;

  // Same configuration, no schedule and no history: one per job.
  virtual std::unique_ptr<Scheduler> clone_fresh() const = 0;

  // Whether a run can stop after a step and go on with the same numbers: false for variants
  // that draw noise in step() (DDIM eta > 0, stochastic_sampling) from an unsaved generator.
  virtual bool resumable() const { return true; }
  // Row `row`'s history after the last step (views into the scheduler's tensors: clone them
  // to keep them past the next step). Memoryless schedulers return an empty state.
  virtual SchedulerRowState save_row(std::int64_t row) const {
    (void)row;
    return {};
  }
  // Sets the history for a batch whose next step is `next_step` from its rows' saved states,
  // in row order (set_timesteps must have run). The rows must come from the same step of runs
  // with this configuration: Error(invalid_argument) if their counters or shapes differ.
  virtual void restore_rows(int next_step, const std::vector<const SchedulerRowState*>& rows);

 protected:
  void check_step(int step_index) const;  // set_timesteps called and 0 <= i < N
  int num_inference_steps_ = 0;
};

using SchedulerFactory = std::function<std::unique_ptr<Scheduler>(const SchedulerParams& params)>;

// Adds a scheduler type (runtime/registry.hpp: Error(invalid_argument) if the name is taken).
// Built-ins: FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler, DDIMScheduler,
// EulerDiscreteScheduler.
void register_scheduler(std::string name, SchedulerFactory factory);

// Error(invalid_argument) for an unknown name (the message lists the known names) or a bad
// parameter (the message names the key).
std::unique_ptr<Scheduler> make_scheduler(std::string_view name, const SchedulerParams& params = {});

// Registered names, sorted.
std::vector<std::string> scheduler_names();

}  // namespace vgen
