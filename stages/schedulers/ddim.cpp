// DDIMScheduler, ported from diffusers; see the parity notes in stages/schedulers/scheduler.cpp.
#include "stages/schedulers/scheduler_common.hpp"

namespace vgen::scheduler_detail {
namespace {

// ---- DDIMScheduler -----------------------------------------------------------------------

struct DDIMConfig : DdpmConfig {
  Tensor final_alpha_cumprod;
  bool clip_sample = true;
  double clip_range = 1.0, eta = 0.0;
};

class DDIM final : public Base<DDIM, DDIMConfig> {
 public:
  static constexpr std::string_view kName = "DDIMScheduler";
  explicit DDIM(DDIMConfig c) : Base(std::move(c)) {}
  static DDIMConfig read_config(ParamReader& p) {
    DDIMConfig c;
    read_ddpm(p, c, "leading", {"epsilon", "sample", "v_prediction"});
    c.final_alpha_cumprod = p.flag("set_alpha_to_one", true) ? at::scalar_tensor(1.0, at::kFloat) : c.alphas_cumprod[0];
    c.clip_sample = p.flag("clip_sample", true);
    c.clip_range = p.number("clip_sample_range", 1.0);
    c.eta = p.number("eta", 0.0);  // a step() argument in diffusers; fixed per scheduler here
    p.off_only("thresholding");
    for (auto k : {"dynamic_thresholding_ratio", "sample_max_value"}) p.ignore(k);
    return c;
  }
  static void check_config(const ParamReader& p, DDIMConfig& c) {
    if (c.eta < 0) p.bad("eta", "must be >= 0");
  }

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

}  // namespace

std::unique_ptr<Scheduler> make_ddim(const SchedulerParams& params) { return make_from_params<DDIM>(params); }

}  // namespace vgen::scheduler_detail
