// FlowMatchEulerDiscreteScheduler with diffusers' own schedule, ported from diffusers; see the
// parity notes in stages/schedulers/scheduler.cpp. The same class driven by a pipeline's sigmas
// (LTX) is flow_match_sigmas.cpp; make_flow_match picks one by the params.
#include "stages/schedulers/scheduler_common.hpp"

namespace vgen::scheduler_detail {
namespace {

// ---- FlowMatchEulerDiscreteScheduler -----------------------------------------------------

struct FlowMatchConfig {
  int train = 1000;
  double shift = 1.0;
  std::optional<double> shift_terminal;
  bool invert_sigmas = false, stochastic = false;
};

class FlowMatchEuler final : public Base<FlowMatchEuler, FlowMatchConfig> {
 public:
  static constexpr std::string_view kName = "FlowMatchEulerDiscreteScheduler";
  explicit FlowMatchEuler(FlowMatchConfig c) : Base(c) {
    // The training schedule, shifted once in float32; its end points seed set_timesteps.
    Tensor s = at::arange(c_.train, 0, -1, at::kFloat) / c_.train;
    s = c_.shift * s / (1 + (c_.shift - 1) * s);
    sigma_min_ = s[-1].item<double>();
    sigma_max_ = s[0].item<double>();
  }
  static FlowMatchConfig read_config(ParamReader& p) {
    FlowMatchConfig c;
    c.train = p.integer("num_train_timesteps", 1000, 1, 100'000);  // the schedule's length: bounded
    c.shift = p.number("shift", 1.0);
    c.shift_terminal = p.optional_number("shift_terminal");
    c.invert_sigmas = p.flag("invert_sigmas", false);
    c.stochastic = p.flag("stochastic_sampling", false);
    for (auto k : {"use_dynamic_shifting", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas"}) p.off_only(k);
    for (auto k : {"base_shift", "max_shift", "base_image_seq_len", "max_image_seq_len", "time_shift_type"}) p.ignore(k);
    return c;
  }

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

}  // namespace

std::unique_ptr<Scheduler> make_flow_match(const SchedulerParams& params) {
  return wants_pipeline_sigmas(params) ? make_flow_match_pipeline_sigmas(params) : make_from_params<FlowMatchEuler>(params);
}

}  // namespace vgen::scheduler_detail
