// FlowMatchEulerDiscreteScheduler as a pipeline drives it with its own sigmas and a
// resolution-dependent shift: LTXPipeline passes sigmas = linspace(1, 1/n, n) and
// mu = calculate_shift(latent sequence length, ...) to set_timesteps; HunyuanVideo15Pipeline
// passes linspace(1, 0, n + 1)[:-1] and shifts by the config's fixed shift. vgen's set_timesteps
// takes only n, so the two pipeline inputs are vgen parameters next to diffusers' config keys:
//   "sigma_schedule": "one_to_one_over_n" | "one_to_zero"   the pipeline's sigmas (required: it
//                                            selects this class)
//   "image_seq_len":  number                 the latent sequence length mu is computed from
//                                            (required with use_dynamic_shifting)
// Everything after the custom sigmas runs in float32 as diffusers' numpy does it on a float32
// array (numpy 2: a Python float meets a float32 array as float32).
#include "stages/schedulers/scheduler_common.hpp"

namespace vgen::scheduler_detail {
namespace {

struct FlowSigmasConfig {
  int train = 1000;
  double shift = 1.0;
  bool dynamic = false, exponential = true;
  bool to_zero = false;  // linspace(1, 0, n + 1)[:-1] instead of linspace(1, 1/n, n)
  double mu = 0.0;  // derived in check_config
  std::optional<double> shift_terminal;
  // calculate_shift's inputs, read for mu.
  double base_len = 256, max_len = 4096, base_shift = 0.5, max_shift = 1.15;
  std::optional<double> seq_len;
};

class FlowMatchEulerSigmas final : public Base<FlowMatchEulerSigmas, FlowSigmasConfig> {
 public:
  static constexpr std::string_view kName = "FlowMatchEulerDiscreteScheduler";
  explicit FlowMatchEulerSigmas(FlowSigmasConfig c) : Base(c) {}

  static FlowSigmasConfig read_config(ParamReader& p) {
    FlowSigmasConfig c;
    c.to_zero = p.text("sigma_schedule", "one_to_one_over_n", {"one_to_one_over_n", "one_to_zero"}) == "one_to_zero";
    c.train = p.integer("num_train_timesteps", 1000, 1, 100'000);
    c.shift = p.number("shift", 1.0);
    c.shift_terminal = p.optional_number("shift_terminal");
    c.dynamic = p.flag("use_dynamic_shifting", false);
    c.exponential = p.text("time_shift_type", "exponential", {"exponential", "linear"}) == "exponential";
    c.base_len = p.number("base_image_seq_len", 256);
    c.max_len = p.number("max_image_seq_len", 4096);
    c.base_shift = p.number("base_shift", 0.5);
    c.max_shift = p.number("max_shift", 1.15);
    c.seq_len = p.optional_number("image_seq_len");
    for (auto k : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas", "stochastic_sampling"})
      p.off_only(k);
    return c;
  }
  // calculate_shift(image_seq_len, base_seq_len, max_seq_len, base_shift, max_shift) in Python floats.
  static void check_config(const ParamReader& p, FlowSigmasConfig& c) {
    if (!c.dynamic) return;
    if (!c.seq_len) p.bad("image_seq_len", "is required with use_dynamic_shifting (the latent sequence length)");
    if (c.max_len == c.base_len) p.bad("max_image_seq_len", "must differ from base_image_seq_len");
    const double m = (c.max_shift - c.base_shift) / (c.max_len - c.base_len);
    const double b = c.base_shift - m * c.base_len;
    c.mu = *c.seq_len * m + b;
  }

  void set_timesteps(int n) override {
    check_num_steps(n);
    Doubles grid = c_.to_zero ? np_linspace(1.0, 0.0, n + 1) : np_linspace(1.0, 1.0 / n, n);
    if (c_.to_zero) grid.pop_back();
    std::vector<float> s(grid.begin(), grid.end());  // np.array(sigmas).astype(np.float32)
    if (c_.dynamic) {
      // time_shift(mu, 1.0, s): exp(mu) / (exp(mu) + (1/s - 1) ** 1.0) or the linear form.
      const float m = static_cast<float>(c_.exponential ? std::exp(c_.mu) : c_.mu);
      for (float& v : s) v = m / (m + (1.0f / v - 1.0f));
    } else {
      const float k = static_cast<float>(c_.shift), k1 = static_cast<float>(c_.shift - 1);
      for (float& v : s) v = k * v / (1.0f + k1 * v);
    }
    if (c_.shift_terminal && *c_.shift_terminal != 0) {
      // stretch_shift_to_terminal: (1 - s[-1]) / (1 - terminal), the divisor a Python float.
      const float scale = (1.0f - s.back()) / static_cast<float>(1.0 - *c_.shift_terminal);
      for (float& v : s) v = 1.0f - (1.0f - v) / scale;
    }
    const Tensor sig = at::tensor(at::ArrayRef<float>(s), at::kFloat);
    timesteps_ = sig * c_.train;
    sigmas_ = at::cat({sig, at::zeros({1}, at::kFloat)});
    num_inference_steps_ = n;
  }

  Tensor step(const Tensor& model_output, int i, const Tensor& sample, at::Generator*) override {
    check_step(i);
    const Tensor x = sample.to(at::kFloat);  // diffusers upcasts the sample to float32 here
    return (x + (sigmas_[i + 1] - sigmas_[i]) * model_output).to(model_output.scalar_type());
  }
};

}  // namespace

bool wants_pipeline_sigmas(const SchedulerParams& params) { return params.count("sigma_schedule") > 0; }

std::unique_ptr<Scheduler> make_flow_match_pipeline_sigmas(const SchedulerParams& params) {
  return make_from_params<FlowMatchEulerSigmas>(params);
}

}  // namespace vgen::scheduler_detail
