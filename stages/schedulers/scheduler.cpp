#include "stages/schedulers/scheduler.hpp"

#include "runtime/registry.hpp"
#include "stages/schedulers/scheduler_common.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <numbers>
#include <optional>
#include <set>
#include <utility>

#include "runtime/errors.hpp"

// Parity notes. diffusers builds schedules partly in numpy float64 and partly in torch
// float32, and its step() mixes 0-dim float32 tensors with the sample. To reproduce it to
// the bit, the numpy parts are done here on std::vector<double> with numpy's own formulas
// (linspace, arange with a float step, interp), and the torch parts with the same ATen ops in
// the same order and dtypes (Python `s - t` is rsub, `1 / t` is reciprocal, `t ** 0.5` is pow).

namespace vgen {
namespace {

using namespace scheduler_detail;

// ---- FlowMatchEulerDiscreteScheduler -----------------------------------------------------

struct FlowMatchConfig {
  int train = 1000;
  double shift = 1.0;
  std::optional<double> shift_terminal;
  bool invert_sigmas = false, stochastic = false;
};

class FlowMatchEuler final : public Base<FlowMatchEuler, FlowMatchConfig> {
 public:
  explicit FlowMatchEuler(FlowMatchConfig c) : Base(c) {
    // The training schedule, shifted once in float32; its end points seed set_timesteps.
    Tensor s = at::arange(c_.train, 0, -1, at::kFloat) / c_.train;
    s = c_.shift * s / (1 + (c_.shift - 1) * s);
    sigma_min_ = s[-1].item<double>();
    sigma_max_ = s[0].item<double>();
  }
  static std::unique_ptr<Scheduler> make(const SchedulerParams& params) {
    ParamReader p("FlowMatchEulerDiscreteScheduler", params);
    FlowMatchConfig c;
    c.train = p.integer("num_train_timesteps", 1000, 1, 100'000);  // the schedule's length: bounded
    c.shift = p.number("shift", 1.0);
    c.shift_terminal = p.optional_number("shift_terminal");
    c.invert_sigmas = p.flag("invert_sigmas", false);
    c.stochastic = p.flag("stochastic_sampling", false);
    for (auto k : {"use_dynamic_shifting", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas"}) p.off_only(k);
    for (auto k : {"base_shift", "max_shift", "base_image_seq_len", "max_image_seq_len", "time_shift_type"}) p.ignore(k);
    p.finish();
    return std::make_unique<FlowMatchEuler>(c);
  }

  std::string_view name() const noexcept override { return "FlowMatchEulerDiscreteScheduler"; }

  void set_timesteps(int n) override {
    check_num_steps(n);
    Doubles s = np_linspace(sigma_max_ * c_.train, sigma_min_ * c_.train, n);
    for (double& v : s) {
      v = v / c_.train;
      v = c_.shift * v / (1 + (c_.shift - 1) * v);  // the shift applied a second time, as diffusers
    }
    stretch_to_terminal(s, c_.shift_terminal);
    Tensor sig = f32_from(s);
    timesteps_ = sig * c_.train;
    if (c_.invert_sigmas) {
      sig = at::rsub(sig, 1.0);
      timesteps_ = sig * c_.train;
      sigmas_ = at::cat({sig, at::ones({1}, at::kFloat)});
    } else {
      sigmas_ = at::cat({sig, at::zeros({1}, at::kFloat)});
    }
    num_inference_steps_ = n;
  }

  bool resumable() const override { return !c_.stochastic; }

  Tensor step(const Tensor& model_output, int i, const Tensor& sample, at::Generator* gen) override {
    check_step(i);
    const Tensor x = sample.to(at::kFloat);  // diffusers upcasts the sample to float32 here
    const Tensor sigma = sigmas_[i], sigma_next = sigmas_[i + 1];
    Tensor prev;
    if (c_.stochastic) {
      const Tensor x0 = x - sigma * model_output;
      prev = at::rsub(sigma_next, 1.0) * x0 + sigma_next * randn_like(x, gen);
    } else {
      prev = x + (sigma_next - sigma) * model_output;
    }
    return prev.to(model_output.scalar_type());
  }

 private:
  double sigma_min_ = 0, sigma_max_ = 0;
};

// ---- DDIMScheduler -----------------------------------------------------------------------

struct DDIMConfig : DdpmConfig {
  Tensor final_alpha_cumprod;
  bool clip_sample = true;
  double clip_range = 1.0, eta = 0.0;
};

class DDIM final : public Base<DDIM, DDIMConfig> {
 public:
  explicit DDIM(DDIMConfig c) : Base(std::move(c)) {}
  static std::unique_ptr<Scheduler> make(const SchedulerParams& params) {
    ParamReader p("DDIMScheduler", params);
    DDIMConfig c;
    read_ddpm(p, c, "leading", {"epsilon", "sample", "v_prediction"});
    c.final_alpha_cumprod = p.flag("set_alpha_to_one", true) ? at::scalar_tensor(1.0, at::kFloat) : c.alphas_cumprod[0];
    c.clip_sample = p.flag("clip_sample", true);
    c.clip_range = p.number("clip_sample_range", 1.0);
    c.eta = p.number("eta", 0.0);  // a step() argument in diffusers; fixed per scheduler here
    p.off_only("thresholding");
    for (auto k : {"dynamic_thresholding_ratio", "sample_max_value"}) p.ignore(k);
    p.finish();
    if (c.eta < 0) p.bad("eta", "must be >= 0");
    return std::make_unique<DDIM>(std::move(c));
  }

  std::string_view name() const noexcept override { return "DDIMScheduler"; }

  void set_timesteps(int n) override {
    if (n < 1 || n > c_.train) {
      throw Error(ErrorKind::invalid_argument, "DDIMScheduler: num_inference_steps must be in [1, num_train_timesteps]");
    }
    timesteps_ = i64_from(spaced_timesteps(c_.spacing, c_.train, n, c_.steps_offset, 0));
    num_inference_steps_ = static_cast<int>(timesteps_.size(0));
    stride_ = c_.train / n;
  }

  bool resumable() const override { return c_.eta == 0; }

  Tensor step(const Tensor& model_output, int i, const Tensor& sample, at::Generator* gen) override {
    check_step(i);
    const auto t = timesteps_[i].item<std::int64_t>();
    const auto prev_t = t - stride_;
    const Tensor a_t = c_.alphas_cumprod[t];
    const Tensor a_prev = prev_t >= 0 ? c_.alphas_cumprod[prev_t] : c_.final_alpha_cumprod;
    const Tensor b_t = at::rsub(a_t, 1);
    const Tensor sa = at::pow(a_t, 0.5), sb = at::pow(b_t, 0.5);
    Tensor x0 = model_output, eps = model_output;
    if (c_.prediction == "epsilon") {
      x0 = (sample - sb * model_output) / sa;
    } else if (c_.prediction == "sample") {
      eps = (sample - sa * x0) / sb;
    } else {  // v_prediction
      x0 = sa * sample - sb * model_output;
      eps = sa * model_output + sb * sample;
    }
    if (c_.clip_sample) x0 = x0.clamp(-c_.clip_range, c_.clip_range);
    const Tensor variance = (at::rsub(a_prev, 1) / b_t) * at::rsub(a_t / a_prev, 1);
    const Tensor std_dev = at::pow(variance, 0.5) * c_.eta;
    const Tensor direction = at::pow(at::rsub(a_prev, 1) - at::pow(std_dev, 2), 0.5) * eps;
    const Tensor prev = at::pow(a_prev, 0.5) * x0 + direction;
    return c_.eta > 0 ? prev + std_dev * randn_like(model_output, gen) : prev;
  }

 private:
  std::int64_t stride_ = 1;
};

// ---- EulerDiscreteScheduler --------------------------------------------------------------

struct EulerConfig : DdpmConfig {};

class EulerDiscrete final : public Base<EulerDiscrete, EulerConfig> {
 public:
  explicit EulerDiscrete(EulerConfig c) : Base(std::move(c)) {}
  static std::unique_ptr<Scheduler> make(const SchedulerParams& params) {
    ParamReader p("EulerDiscreteScheduler", params);
    EulerConfig c;
    read_ddpm(p, c, "linspace", {"epsilon", "v_prediction", "sample", "original_sample"});
    c.final_sigmas = p.text("final_sigmas_type", "zero", {"zero", "sigma_min"});
    p.text("interpolation_type", "linear", {"linear"});
    p.text("timestep_type", "discrete", {"discrete"});
    for (auto k : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas"}) p.off_only(k);
    for (auto k : {"sigma_min", "sigma_max"}) p.ignore(k);  // Karras-family only
    p.finish();
    return std::make_unique<EulerDiscrete>(std::move(c));
  }

  std::string_view name() const noexcept override { return "EulerDiscreteScheduler"; }

  void set_timesteps(int n) override {
    check_num_steps(n);
    Doubles t = spaced_timesteps(c_.spacing, c_.train, n, c_.steps_offset, 0, false);
    for (double& v : t) v = static_cast<float>(v);  // numpy casts the grid to float32 first
    const Doubles base = ddpm_sigmas(c_.alphas_cumprod);
    Doubles s;
    for (double v : t) s.push_back(np_interp_grid(v, base));
    s.push_back(final_sigma(c_));
    sigmas_ = f32_from(s);
    timesteps_ = f32_from(t);
    num_inference_steps_ = static_cast<int>(t.size());
    const Tensor max_sigma = sigmas_.max();
    init_noise_sigma_ = (c_.spacing == "leading" ? at::pow(at::pow(max_sigma, 2) + 1, 0.5) : max_sigma).item<double>();
  }
  double init_noise_sigma() const override { return init_noise_sigma_; }

  Tensor scale_model_input(const Tensor& sample, int i) const override {
    check_step(i);
    return sample / at::pow(at::pow(sigmas_[i], 2) + 1, 0.5);
  }

  Tensor step(const Tensor& model_output, int i, const Tensor& sample, at::Generator*) override {
    check_step(i);
    const Tensor x = sample.to(at::kFloat);  // diffusers upcasts the sample to float32 here
    const Tensor sigma = sigmas_[i];
    const Tensor sigma_hat = sigma * (0.0 + 1);  // gamma = 0: no churn
    const Tensor x0 =
        c_.prediction == "epsilon"        ? x - sigma_hat * model_output
        : c_.prediction == "v_prediction" ? model_output * (-sigma / at::pow(at::pow(sigma, 2) + 1, 0.5)) +
                                                (x / (at::pow(sigma, 2) + 1))
                                          : model_output;
    const Tensor derivative = (x - x0) / sigma_hat;
    const Tensor prev = x + derivative * (sigmas_[i + 1] - sigma_hat);
    return prev.to(model_output.scalar_type());
  }

 private:
  double init_noise_sigma_ = 1.0;
};

// The registered factory: diffusers' own schedule, or a pipeline's sigmas (scheduler_flow_sigmas.cpp).
std::unique_ptr<Scheduler> make_flow_match(const SchedulerParams& params) {
  return wants_pipeline_sigmas(params) ? make_flow_match_pipeline_sigmas(params) : FlowMatchEuler::make(params);
}

// ---- registry ----------------------------------------------------------------------------

Registry<SchedulerFactory>& registry() {
  static Registry<SchedulerFactory> r("scheduler", {
                                                       {"FlowMatchEulerDiscreteScheduler", &make_flow_match},
                                                       {"UniPCMultistepScheduler", &make_unipc},
                                                       {"DDIMScheduler", &DDIM::make},
                                                       {"EulerDiscreteScheduler", &EulerDiscrete::make},
                                                   });
  return r;
}

}  // namespace

void Scheduler::restore_rows(int next_step, const std::vector<const SchedulerRowState*>& rows) {
  if (num_inference_steps_ == 0 || next_step < 0 || next_step > num_inference_steps_) {
    throw Error(ErrorKind::invalid_argument, std::string(name()) + ": cannot resume at step " + std::to_string(next_step));
  }
  for (const auto* r : rows) {
    if (r && !r->empty()) {
      throw Error(ErrorKind::invalid_argument, std::string(name()) + ": keeps no history, but a saved state has some");
    }
  }
}

void Scheduler::check_step(int step_index) const {
  if (num_inference_steps_ == 0) {
    throw Error(ErrorKind::invalid_argument, std::string(name()) + ": set_timesteps must be called first");
  }
  if (step_index < 0 || step_index >= num_inference_steps_) {
    throw Error(ErrorKind::invalid_argument, std::string(name()) + ": step index " + std::to_string(step_index) +
                                                 " outside [0, " + std::to_string(num_inference_steps_) + ")");
  }
}

void register_scheduler(std::string name, SchedulerFactory factory) { registry().add(std::move(name), std::move(factory)); }

std::unique_ptr<Scheduler> make_scheduler(std::string_view name, const SchedulerParams& params) {
  return registry().get(name)(params);  // the factory runs outside the registry's lock
}

std::vector<std::string> scheduler_names() { return registry().names(); }

}  // namespace vgen
