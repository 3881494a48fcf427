#include "stages/scheduler.hpp"

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

using at::Tensor;
using Doubles = std::vector<double>;

// ---- config parameters -------------------------------------------------------------------

class ParamReader {
 public:
  ParamReader(std::string_view type, const SchedulerParams& params) : type_(type), params_(params) {}

  template <typename T>
  T get(std::string_view key, T fallback, const char* what) {
    const auto* v = find(key);
    if (!v) return fallback;
    if (const auto* x = std::get_if<T>(v)) return *x;
    bad(key, what);
  }
  double number(std::string_view key, double fallback) { return get(key, fallback, "must be a number"); }
  bool flag(std::string_view key, bool fallback) { return get(key, fallback, "must be true or false"); }
  int integer(std::string_view key, int fallback, int min = 0) {
    const double d = number(key, fallback);
    if (d != std::floor(d) || d < min || d > 1e9) bad(key, "must be an integer >= " + std::to_string(min));
    return static_cast<int>(d);
  }
  std::string text(std::string_view key, std::string fallback, std::initializer_list<std::string_view> allowed) {
    auto s = get(key, std::move(fallback), "must be a string");
    if (std::find(allowed.begin(), allowed.end(), s) != allowed.end()) return s;
    std::string names;
    for (auto a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
    bad(key, "must be one of: " + names);
  }
  // null reads as absent for these two.
  std::optional<double> optional_number(std::string_view key) {
    if (is_null(key)) return std::nullopt;
    return get(key, 0.0, "must be a number or null");
  }
  Doubles numbers(std::string_view key) {
    return is_null(key) ? Doubles{} : get(key, Doubles{}, "must be a list of numbers or null");
  }
  // A known diffusers key for a feature not ported: accepted only when off (null/false).
  void off_only(std::string_view key) {
    if (!is_null(key) && get(key, false, "must be false or null")) bad(key, "is not supported by vgen");
  }
  void ignore(std::string_view key) { find(key); }  // accepted, no effect on the ported paths
  [[noreturn]] void bad(std::string_view key, const std::string& what) const {
    throw Error(ErrorKind::invalid_argument, std::string(type_) + ": parameter '" + std::string(key) + "' " + what);
  }
  void finish() const {
    for (const auto& [key, value] : params_) {
      if (!key.starts_with('_') && !used_.contains(key)) {
        throw Error(ErrorKind::invalid_argument, std::string(type_) + ": unknown parameter '" + key + "'");
      }
    }
  }

 private:
  const SchedulerParam* find(std::string_view key) {
    used_.emplace(key);
    auto it = params_.find(key);
    return it == params_.end() ? nullptr : &it->second;
  }
  bool is_null(std::string_view key) {
    const auto* v = find(key);
    return !v || std::holds_alternative<std::monostate>(*v);
  }
  std::string_view type_;
  const SchedulerParams& params_;
  std::set<std::string, std::less<>> used_;
};

// ---- numpy's formulas in float64 -----------------------------------------------------------

Doubles np_linspace(double start, double stop, int num) {
  if (num <= 1) return Doubles(std::max(num, 0), start);
  Doubles y(num);
  const double step = (stop - start) / (num - 1);
  for (int i = 0; i < num; ++i) y[i] = (step == 0 ? i / double(num - 1) * (stop - start) : i * step) + start;
  y.back() = stop;
  return y;
}

// np.arange(start, stop, step) for a float step: numpy fills start + i * (second - first).
Doubles np_arange(double start, double stop, double step) {
  const double len = std::ceil((stop - start) / step);
  Doubles y(len > 0 ? static_cast<std::size_t>(len) : 0);
  const double delta = (start + step) - start;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = i == 0 ? start : i == 1 ? start + step : start + double(i) * delta;
  return y;
}

// np.interp(x, arange(len(fp)), fp).
double np_interp_grid(double x, const Doubles& fp) {
  const auto n = static_cast<std::int64_t>(fp.size());
  if (std::isnan(x)) return x;
  if (x < 0) return fp.front();
  if (x >= static_cast<double>(n - 1)) return fp.back();
  const auto j = static_cast<std::int64_t>(std::floor(x));
  if (static_cast<double>(j) == x) return fp[j];
  const double slope = (fp[j + 1] - fp[j]) / 1.0;
  double r = slope * (x - static_cast<double>(j)) + fp[j];
  if (std::isnan(r)) {
    r = slope * (x - static_cast<double>(j + 1)) + fp[j + 1];
    if (std::isnan(r) && fp[j] == fp[j + 1]) r = fp[j];
  }
  return r;
}

Doubles to_doubles(const Tensor& t) {
  const Tensor c = t.to(at::kDouble).contiguous();
  return Doubles(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
Tensor f32_from(const Doubles& v) {  // torch.from_numpy(float64).to(float32) / astype(float32)
  return at::tensor(at::ArrayRef<double>(v), at::kDouble).to(at::kFloat);
}

// The `timestep_spacing` options of the DDPM-family schedulers, in float64 before the cast.
// `extra` = 1 for UniPC's n+1-point grids (last point dropped), 0 for DDIM/Euler; Euler does
// not round its linspace grid.
Doubles spaced_timesteps(const std::string& spacing, int train, int n, int offset, int extra, bool round = true) {
  Doubles t;
  if (spacing == "linspace") {
    auto g = np_linspace(0, train - 1, n + extra);
    for (auto it = g.rbegin(); it != g.rend() - extra; ++it) t.push_back(round ? std::nearbyint(*it) : *it);
  } else if (spacing == "leading") {
    const int ratio = train / (n + extra);
    for (int k = n + extra - 1; k >= extra; --k) t.push_back(double(k) * ratio + offset);
  } else {  // trailing
    for (double v : np_arange(train, 0, -(double(train) / n))) t.push_back(std::nearbyint(v) - 1);
  }
  return t;
}

// Config shared by the beta-schedule (DDPM-family) schedulers: UniPC, DDIM, Euler.
struct DdpmConfig {
  int train = 1000, steps_offset = 0;
  Tensor alphas_cumprod;  // float32
  std::string prediction, spacing, final_sigmas = "zero";
};

void read_ddpm(ParamReader& p, DdpmConfig& c, std::string spacing, std::initializer_list<std::string_view> predictions) {
  const int train = c.train = p.integer("num_train_timesteps", 1000, 1);
  c.prediction = p.text("prediction_type", "epsilon", predictions);
  c.spacing = p.text("timestep_spacing", std::move(spacing), {"linspace", "leading", "trailing"});
  c.steps_offset = p.integer("steps_offset", 0);
  const double beta_start = p.number("beta_start", 0.0001), beta_end = p.number("beta_end", 0.02);
  const auto schedule = p.text("beta_schedule", "linear", {"linear", "scaled_linear", "squaredcos_cap_v2"});
  const Doubles trained = p.numbers("trained_betas");
  p.off_only("rescale_betas_zero_snr");
  Tensor betas;
  if (!trained.empty()) {
    betas = f32_from(trained);
  } else if (schedule == "linear") {
    betas = at::linspace(beta_start, beta_end, train, at::kFloat);
  } else if (schedule == "scaled_linear") {
    betas = at::pow(at::linspace(std::pow(beta_start, 0.5), std::pow(beta_end, 0.5), train, at::kFloat), 2);
  } else {  // Glide cosine schedule, in Python floats
    auto alpha_bar = [](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * std::numbers::pi / 2), 2); };
    Doubles b;
    for (int i = 0; i < train; ++i) {
      b.push_back(std::min(1 - alpha_bar(double(i + 1) / train) / alpha_bar(double(i) / train), 0.999));
    }
    betas = f32_from(b);
  }
  c.alphas_cumprod = at::cumprod(at::rsub(betas, 1.0), 0);
}

// ((1 - a) / a) ** 0.5 in float32, as numpy float64 values.
Doubles ddpm_sigmas(const Tensor& alphas_cumprod) {
  return to_doubles(at::pow(at::rsub(alphas_cumprod, 1) / alphas_cumprod, 0.5));
}
// The sigma after the last step (final_sigmas_type).
double final_sigma(const DdpmConfig& c) { return c.final_sigmas == "zero" ? 0.0 : ddpm_sigmas(c.alphas_cumprod)[0]; }

Tensor i64_from(const Doubles& v) {  // astype(int64): truncates
  std::vector<std::int64_t> t(v.begin(), v.end());
  return at::tensor(at::ArrayRef<std::int64_t>(t), at::kLong);
}
// diffusers' randn_tensor: drawn on the generator's device, then moved to the sample's.
Tensor randn_like(const Tensor& like, at::Generator* gen) {
  if (!gen) return at::randn(like.sizes(), like.options());
  return at::randn(like.sizes(), *gen, like.options().device(gen->device())).to(like.device());
}

void check_num_steps(int n) {
  if (n < 1) throw Error(ErrorKind::invalid_argument, "set_timesteps: num_inference_steps must be >= 1");
}

// diffusers' stretch_shift_to_terminal, on the float64 sigmas.
void stretch_to_terminal(Doubles& s, std::optional<double> terminal) {
  if (!terminal || *terminal == 0) return;
  const double scale = (1 - s.back()) / (1 - *terminal);
  for (double& v : s) v = 1 - (1 - v) / scale;
}

// Shared plumbing: the schedule tensors, and clone_fresh() from the immutable config.
template <typename Self, typename Config>
class Base : public Scheduler {
 public:
  explicit Base(Config c) : c_(std::move(c)) {}
  const Tensor& timesteps() const override { return timesteps_; }
  const Tensor& sigmas() const override { return sigmas_; }
  std::unique_ptr<Scheduler> clone_fresh() const override { return std::make_unique<Self>(c_); }

 protected:
  Config c_;
  Tensor timesteps_, sigmas_;
};

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
    c.train = p.integer("num_train_timesteps", 1000, 1);
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

// ---- UniPCMultistepScheduler -------------------------------------------------------------

struct UniPCConfig : DdpmConfig {
  int order = 2;
  bool predict_x0 = true, bh1 = false, lower_order_final = true, flow = false;
  double flow_shift = 1.0;
  std::optional<double> shift_terminal;
  std::set<int> disable_corrector;
};

class UniPCMultistep final : public Base<UniPCMultistep, UniPCConfig> {
 public:
  explicit UniPCMultistep(UniPCConfig c) : Base(std::move(c)) {}
  static std::unique_ptr<Scheduler> make(const SchedulerParams& params) {
    ParamReader p("UniPCMultistepScheduler", params);
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
    for (auto k : {"thresholding", "solver_p", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                   "use_dynamic_shifting"}) {
      p.off_only(k);
    }
    // Only read by thresholding, dynamic shifting and the Karras family.
    for (auto k : {"dynamic_thresholding_ratio", "sample_max_value", "time_shift_type", "sigma_min", "sigma_max"}) p.ignore(k);
    p.finish();
    if (c.order > 3) p.bad("solver_order", "must be 1, 2 or 3");
    if (c.prediction == "flow_prediction" && !c.predict_x0) p.bad("predict_x0", "must be true for flow_prediction");
    if (c.shift_terminal && !c.flow) p.bad("shift_terminal", "needs use_flow_sigmas=true");
    return std::make_unique<UniPCMultistep>(std::move(c));
  }

  std::string_view name() const noexcept override { return "UniPCMultistepScheduler"; }

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

  Tensor step(const Tensor& model_output, int i, const Tensor& sample, at::Generator*) override {
    check_step(i);
    if (i != next_step_) {
      throw Error(ErrorKind::invalid_argument, "UniPCMultistepScheduler: steps must run in order; expected step " +
                                                   std::to_string(next_step_) + ", got " + std::to_string(i));
    }
    const bool use_corrector = i > 0 && !c_.disable_corrector.contains(i - 1) && last_sample_.defined();
    const Tensor converted = convert_model_output(model_output, sample, i);
    const Tensor x = use_corrector ? corrector(converted, last_sample_, this_order_, i) : sample;
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

// ---- registry ----------------------------------------------------------------------------

struct Registry {
  std::mutex mutex;
  std::map<std::string, SchedulerFactory, std::less<>> factories{
      {"FlowMatchEulerDiscreteScheduler", &FlowMatchEuler::make},
      {"UniPCMultistepScheduler", &UniPCMultistep::make},
      {"DDIMScheduler", &DDIM::make},
      {"EulerDiscreteScheduler", &EulerDiscrete::make},
  };
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void Scheduler::check_step(int step_index) const {
  if (num_inference_steps_ == 0) {
    throw Error(ErrorKind::invalid_argument, std::string(name()) + ": set_timesteps must be called first");
  }
  if (step_index < 0 || step_index >= num_inference_steps_) {
    throw Error(ErrorKind::invalid_argument, std::string(name()) + ": step index " + std::to_string(step_index) +
                                                 " outside [0, " + std::to_string(num_inference_steps_) + ")");
  }
}

void register_scheduler(std::string name, SchedulerFactory factory) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.factories.insert_or_assign(std::move(name), std::move(factory));
}

std::unique_ptr<Scheduler> make_scheduler(std::string_view name, const SchedulerParams& params) {
  SchedulerFactory factory;
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    if (auto it = r.factories.find(name); it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : scheduler_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorKind::invalid_argument, "unknown scheduler '" + std::string(name) + "' (known: " + known + ")");
  }
  return factory(params);
}

std::vector<std::string> scheduler_names() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

}  // namespace vgen
