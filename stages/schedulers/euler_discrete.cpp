// EulerDiscreteScheduler, ported from diffusers; see the parity notes in stages/schedulers/scheduler.cpp.
#include "stages/schedulers/scheduler_common.hpp"

namespace vgen::scheduler_detail {
namespace {

// ---- EulerDiscreteScheduler --------------------------------------------------------------

struct EulerConfig : DdpmConfig {};

class EulerDiscrete final : public Base<EulerDiscrete, EulerConfig> {
 public:
  static constexpr std::string_view kName = "EulerDiscreteScheduler";
  explicit EulerDiscrete(EulerConfig c) : Base(std::move(c)) {}
  static EulerConfig read_config(ParamReader& p) {
    EulerConfig c;
    read_ddpm(p, c, "linspace", {"epsilon", "v_prediction", "sample", "original_sample"});
    c.final_sigmas = p.text("final_sigmas_type", "zero", {"zero", "sigma_min"});
    p.text("interpolation_type", "linear", {"linear"});
    p.text("timestep_type", "discrete", {"discrete"});
    for (auto k : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas"}) p.off_only(k);
    for (auto k : {"sigma_min", "sigma_max"}) p.ignore(k);  // Karras-family only
    return c;
  }

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

}  // namespace

std::unique_ptr<Scheduler> make_euler_discrete(const SchedulerParams& params) { return make_from_params<EulerDiscrete>(params); }

}  // namespace vgen::scheduler_detail
