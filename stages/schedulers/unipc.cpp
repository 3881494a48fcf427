// UniPCMultistepScheduler (Wan's default), ported from diffusers; see the parity notes in
// stages/schedulers/scheduler.cpp.
#include "stages/schedulers/scheduler_common.hpp"

namespace vgen::scheduler_detail {
namespace {

// ---- UniPCMultistepScheduler -------------------------------------------------------------

struct UniPCConfig : DdpmConfig {
  int order = 2;
  bool predict_x0 = true, bh1 = false, lower_order_final = true, flow = false;
  // vgen's own key "vgen_corrector_sees_stepped_sample" (diffusion forcing, SkyReels-V2): the
  // DF pipelines step each frame as `latents[:, :, f] = scheduler.step(..., latents[:, :, f])`,
  // so after a step without the corrector diffusers' last_sample is a view that the assignment
  // overwrites: the next corrector sees the stepped sample (this step's input) as last_sample.
  bool corrector_sees_stepped_sample = false;
  double flow_shift = 1.0;
  std::optional<double> shift_terminal;
  std::set<int> disable_corrector;
};

class UniPCMultistep final : public Base<UniPCMultistep, UniPCConfig> {
 public:
  static constexpr std::string_view kName = "UniPCMultistepScheduler";
  explicit UniPCMultistep(UniPCConfig c) : Base(std::move(c)) {}
  static UniPCConfig read_config(ParamReader& p) {
    UniPCConfig c;
    read_ddpm(p, c, "linspace", {"epsilon", "sample", "v_prediction", "flow_prediction"});
    c.order = p.integer("solver_order", 2, 1);
    c.predict_x0 = p.flag("predict_x0", true);
    // diffusers maps the DPM-Solver names onto bh2.
    c.bh1 = p.text("solver_type", "bh2", {"bh1", "bh2", "midpoint", "heun", "logrho"}) == "bh1";
    c.lower_order_final = p.flag("lower_order_final", true);
    for (double d : p.numbers("disable_corrector")) c.disable_corrector.insert(static_cast<int>(d));
    c.flow = p.flag("use_flow_sigmas", false);
    c.flow_shift = p.number("flow_shift", 1.0);
    c.final_sigmas = p.text("final_sigmas_type", "zero", {"zero", "sigma_min"});
    c.shift_terminal = p.optional_number("shift_terminal");
    c.corrector_sees_stepped_sample = p.flag("vgen_corrector_sees_stepped_sample", false);
    for (auto k : {"thresholding", "solver_p", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                   "use_dynamic_shifting"}) {
      p.off_only(k);
    }
    // Only read by thresholding, dynamic shifting and the Karras family.
    for (auto k : {"dynamic_thresholding_ratio", "sample_max_value", "time_shift_type", "sigma_min", "sigma_max"}) p.ignore(k);
    return c;
  }
  static void check_config(const ParamReader& p, UniPCConfig& c) {
    if (c.order > 3) p.bad("solver_order", "must be 1, 2 or 3");
    if (c.prediction == "flow_prediction" && !c.predict_x0) p.bad("predict_x0", "must be true for flow_prediction");
    if (c.shift_terminal && !c.flow) p.bad("shift_terminal", "needs use_flow_sigmas=true");
  }

  void set_timesteps(int n) override {
    check_num_steps(n);
    Doubles t = spaced_timesteps(c_.spacing, c_.train, n, c_.steps_offset, 1);
    Doubles s;
    if (c_.flow) {
      s = np_linspace(1, 1.0 / c_.train, n + 1);
      s.pop_back();
      for (double& v : s) v = c_.flow_shift * v / (1 + (c_.flow_shift - 1) * v);
      stretch_to_terminal(s, c_.shift_terminal);
      if (std::fabs(s[0] - 1) < 1e-6) s[0] -= 1e-6;
      t.clear();
      for (double v : s) t.push_back(v * c_.train);
      s.push_back(c_.final_sigmas == "sigma_min" ? s.back() : 0.0);
    } else {
      const Doubles base = ddpm_sigmas(c_.alphas_cumprod);
      for (double v : t) s.push_back(np_interp_grid(v, base));
      s.push_back(final_sigma(c_));
    }
    sigmas_ = f32_from(s);
    timesteps_ = i64_from(t);
    num_inference_steps_ = static_cast<int>(t.size());
    model_outputs_.assign(c_.order, Tensor());
    last_sample_ = Tensor();
    lower_order_nums_ = 0;
    this_order_ = 0;
    next_step_ = 0;
  }

  // History per row: the model outputs (oldest first; undefined before warm-up) and the last
  // sample, then lower_order_nums and this_order.
  SchedulerRowState save_row(std::int64_t row) const override {
    SchedulerRowState r;
    for (const auto& t : model_outputs_) r.tensors.push_back(t.defined() ? t.narrow(0, row, 1) : Tensor());
    r.tensors.push_back(last_sample_.defined() ? last_sample_.narrow(0, row, 1) : Tensor());
    r.counters = {lower_order_nums_, this_order_};
    return r;
  }

  void restore_rows(int next_step, const std::vector<const SchedulerRowState*>& rows) override {
    if (num_inference_steps_ == 0 || next_step < 0 || next_step > num_inference_steps_ || rows.empty()) {
      throw Error(ErrorKind::invalid_argument, "UniPCMultistepScheduler: cannot resume at step " + std::to_string(next_step));
    }
    const std::size_t n = model_outputs_.size() + 1;
    const auto& first = *rows.front();
    auto bad = [](const std::string& why) {
      throw Error(ErrorKind::invalid_argument, "UniPCMultistepScheduler: saved states do not fit: " + why);
    };
    if (next_step == 0) {  // nothing to carry: the state set_timesteps left
      set_timesteps(num_inference_steps_);
      return;
    }
    if (first.counters.size() != 2 || first.tensors.size() != n) bad("wrong layout");
    for (const auto* r : rows) {
      if (r->counters != first.counters || r->tensors.size() != first.tensors.size()) bad("rows from different steps");
      for (std::size_t k = 0; k < r->tensors.size(); ++k)
        if (r->tensors[k].defined() != first.tensors[k].defined()) bad("rows from different steps");
    }
    std::vector<Tensor> joined(n);
    for (std::size_t k = 0; k < first.tensors.size(); ++k) {
      if (!first.tensors[k].defined()) continue;
      std::vector<Tensor> parts;
      for (const auto* r : rows) parts.push_back(r->tensors[k]);
      joined[k] = parts.size() == 1 ? parts[0] : at::cat(parts, 0);
    }
    model_outputs_.assign(joined.begin(), joined.end() - 1);
    last_sample_ = joined.back();
    lower_order_nums_ = static_cast<int>(first.counters[0]);
    this_order_ = static_cast<int>(first.counters[1]);
    next_step_ = next_step;
  }

  Tensor step(const Tensor& model_output, int i, const Tensor& sample, at::Generator*) override {
    check_step(i);
    if (i != next_step_) {
      throw Error(ErrorKind::invalid_argument, "UniPCMultistepScheduler: steps must run in order; expected step " +
                                                   std::to_string(next_step_) + ", got " + std::to_string(i));
    }
    const bool use_corrector = i > 0 && !c_.disable_corrector.contains(i - 1) && last_sample_.defined();
    const Tensor converted = convert_model_output(model_output, sample, i);
    // The previous step ran no corrector (step 0, or a disabled one): its last_sample was its
    // input, which the DF pipelines' in-place write turned into this step's input.
    const bool aliased = c_.corrector_sees_stepped_sample && (i - 1 == 0 || c_.disable_corrector.contains(i - 2));
    const Tensor x = use_corrector ? corrector(converted, aliased ? sample : last_sample_, this_order_, i) : sample;
    std::rotate(model_outputs_.begin(), model_outputs_.begin() + 1, model_outputs_.end());
    model_outputs_.back() = converted;
    const int order = c_.lower_order_final ? std::min(c_.order, num_inference_steps_ - i) : c_.order;
    this_order_ = std::min(order, lower_order_nums_ + 1);  // warm-up
    last_sample_ = x;
    Tensor prev = predictor(x, this_order_, i);
    if (lower_order_nums_ < c_.order) ++lower_order_nums_;
    ++next_step_;
    return prev;
  }

 private:
  std::pair<Tensor, Tensor> alpha_sigma(const Tensor& sigma) const {
    if (c_.flow) return {at::rsub(sigma, 1), sigma};
    const Tensor alpha = at::pow(at::pow(sigma, 2) + 1, 0.5).reciprocal() * 1;
    return {alpha, sigma * alpha};
  }
  Tensor lambda(int k) const {
    auto [a, s] = alpha_sigma(sigmas_[k]);
    return at::log(a) - at::log(s);
  }

  Tensor convert_model_output(const Tensor& out, const Tensor& x, int i) const {
    const Tensor sigma = sigmas_[i];
    auto [alpha_t, sigma_t] = alpha_sigma(sigma);
    const auto& p = c_.prediction;
    if (c_.predict_x0) {
      if (p == "epsilon") return (x - sigma_t * out) / alpha_t;
      if (p == "sample") return out;
      if (p == "v_prediction") return alpha_t * x - sigma_t * out;
      return x - sigma * out;  // flow_prediction
    }
    if (p == "epsilon") return out;
    if (p == "sample") return (x - alpha_t * out) / sigma_t;
    return alpha_t * out + sigma_t * x;  // v_prediction
  }

  // The UniPC coefficients for a step from sigma index s0 to t using `order` points; the
  // earlier points are sigma indices s0 - 1, s0 - 2, ... paired with older model outputs.
  struct Coeffs {
    Tensor alpha_t, sigma_t, alpha_s0, sigma_s0, h_phi_1, b_h, rhos;
    std::vector<Tensor> d1s;
  };
  Coeffs coefficients(int t, int s0, int order, bool corrector, at::ScalarType dtype) const {
    Coeffs k;
    std::tie(k.alpha_t, k.sigma_t) = alpha_sigma(sigmas_[t]);
    std::tie(k.alpha_s0, k.sigma_s0) = alpha_sigma(sigmas_[s0]);
    const Tensor lambda_s0 = at::log(k.alpha_s0) - at::log(k.sigma_s0);
    const Tensor h = (at::log(k.alpha_t) - at::log(k.sigma_t)) - lambda_s0;
    const Tensor& m0 = model_outputs_.back();
    std::vector<Tensor> rks;
    for (int j = 1; j < order; ++j) {
      const Tensor rk = (lambda(s0 - j) - lambda_s0) / h;
      rks.push_back(rk);
      k.d1s.push_back((model_outputs_[model_outputs_.size() - 1 - j] - m0) / rk);
    }
    rks.push_back(at::ones({}, at::kFloat));
    const Tensor rk_all = at::stack(rks);
    const Tensor hh = c_.predict_x0 ? -h : h;
    k.h_phi_1 = at::expm1(hh);
    Tensor h_phi_k = k.h_phi_1 / hh - 1;
    k.b_h = c_.bh1 ? hh : at::expm1(hh);
    std::vector<Tensor> r, b;
    std::int64_t factorial = 1;
    for (int j = 1; j <= order; ++j) {
      r.push_back(at::pow(rk_all, j - 1));
      b.push_back(h_phi_k * factorial / k.b_h);
      factorial *= j + 1;
      h_phi_k = h_phi_k / hh - 1.0 / static_cast<double>(factorial);
    }
    const Tensor rm = at::stack(r), bv = at::stack(b);
    if (corrector) {
      k.rhos = order == 1 ? at::ones({1}, at::TensorOptions(dtype)) * 0.5 : at::linalg_solve(rm, bv).to(dtype);
    } else if (!k.d1s.empty()) {
      k.rhos = order == 2 ? at::ones({1}, at::TensorOptions(dtype)) * 0.5
                          : at::linalg_solve(rm.slice(0, 0, -1).slice(1, 0, -1), bv.slice(0, 0, -1)).to(dtype);
    }
    return k;
  }
  // sum_k rhos[k] * D1s[k], as diffusers' einsum (0 when there are no earlier points).
  static std::optional<Tensor> weighted(const Tensor& rhos, const std::vector<Tensor>& d1s) {
    if (d1s.empty()) return std::nullopt;
    return at::einsum("k,bkc...->bc...", {rhos, at::stack(d1s, 1)});
  }
  Tensor base_update(const Coeffs& k, const Tensor& x) const {
    const Tensor& m0 = model_outputs_.back();
    if (c_.predict_x0) return k.sigma_t / k.sigma_s0 * x - k.alpha_t * k.h_phi_1 * m0;
    return k.alpha_t / k.alpha_s0 * x - k.sigma_t * k.h_phi_1 * m0;
  }
  const Tensor& outer(const Coeffs& k) const { return c_.predict_x0 ? k.alpha_t : k.sigma_t; }

  Tensor predictor(const Tensor& x, int order, int i) const {
    const Coeffs k = coefficients(i + 1, i, order, false, x.scalar_type());
    const auto res = weighted(k.rhos, k.d1s);
    const Tensor scale = outer(k) * k.b_h;
    const Tensor x_t = base_update(k, x) - (res ? scale * *res : scale * 0);
    return x_t.to(x.scalar_type());
  }
  Tensor corrector(const Tensor& model_t, const Tensor& x, int order, int i) const {
    const Coeffs k = coefficients(i, i - 1, order, true, x.scalar_type());
    const auto res = weighted(k.rhos.slice(0, 0, -1), k.d1s);
    const Tensor d1_t = model_t - model_outputs_.back();
    const Tensor last = k.rhos[-1] * d1_t;
    const Tensor sum = res ? *res + last : at::add(last, 0);
    const Tensor out = base_update(k, x) - outer(k) * k.b_h * sum;
    return out.to(x.scalar_type());
  }

  Tensor last_sample_;
  std::vector<Tensor> model_outputs_;
  int lower_order_nums_ = 0, this_order_ = 0, next_step_ = 0;
};

}  // namespace

std::unique_ptr<Scheduler> make_unipc(const SchedulerParams& params) { return make_from_params<UniPCMultistep>(params); }

}  // namespace vgen::scheduler_detail
