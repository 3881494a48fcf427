// Internal to the scheduler component: what the scheduler implementations share (parameter
// reading with diffusers' config keys, numpy's formulas in float64, the DDPM beta schedule,
// the Base class and the construction preamble make_from_params). Not a public header: only
// the files of stages/schedulers/ include it.
#pragma once

#include "stages/schedulers/scheduler.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <set>
#include <utility>

#include "runtime/errors.hpp"

namespace vgen::scheduler_detail {

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
  int integer(std::string_view key, int fallback, int min = 0, int max = 1'000'000'000) {
    const double d = number(key, fallback);
    if (d != std::floor(d) || d < min || d > max)
      bad(key, "must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
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

inline Doubles np_linspace(double start, double stop, int num) {
  if (num <= 1) return Doubles(std::max(num, 0), start);
  Doubles y(num);
  const double step = (stop - start) / (num - 1);
  for (int i = 0; i < num; ++i) y[i] = (step == 0 ? i / double(num - 1) * (stop - start) : i * step) + start;
  y.back() = stop;
  return y;
}

// np.arange(start, stop, step) for a float step: numpy fills start + i * (second - first).
inline Doubles np_arange(double start, double stop, double step) {
  const double len = std::ceil((stop - start) / step);
  Doubles y(len > 0 ? static_cast<std::size_t>(len) : 0);
  const double delta = (start + step) - start;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = i == 0 ? start : i == 1 ? start + step : start + double(i) * delta;
  return y;
}

// np.interp(x, arange(len(fp)), fp).
inline double np_interp_grid(double x, const Doubles& fp) {
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

inline Doubles to_doubles(const Tensor& t) {
  const Tensor c = t.to(at::kDouble).contiguous();
  return Doubles(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
inline Tensor f32_from(const Doubles& v) {  // torch.from_numpy(float64).to(float32) / astype(float32)
  return at::tensor(at::ArrayRef<double>(v), at::kDouble).to(at::kFloat);
}

// The `timestep_spacing` options of the DDPM-family schedulers, in float64 before the cast.
// `extra` = 1 for UniPC's n+1-point grids (last point dropped), 0 for DDIM/Euler; Euler does
// not round its linspace grid.
inline Doubles spaced_timesteps(const std::string& spacing, int train, int n, int offset, int extra, bool round = true) {
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

inline void read_ddpm(ParamReader& p, DdpmConfig& c, std::string spacing, std::initializer_list<std::string_view> predictions) {
  // Bounded: the schedule is a tensor of this many entries (1e9 was a 4 GB allocation).
  const int train = c.train = p.integer("num_train_timesteps", 1000, 1, 100'000);
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
inline Doubles ddpm_sigmas(const Tensor& alphas_cumprod) {
  return to_doubles(at::pow(at::rsub(alphas_cumprod, 1) / alphas_cumprod, 0.5));
}
// The sigma after the last step (final_sigmas_type).
inline double final_sigma(const DdpmConfig& c) { return c.final_sigmas == "zero" ? 0.0 : ddpm_sigmas(c.alphas_cumprod)[0]; }

inline Tensor i64_from(const Doubles& v) {  // astype(int64): truncates
  std::vector<std::int64_t> t(v.begin(), v.end());
  return at::tensor(at::ArrayRef<std::int64_t>(t), at::kLong);
}
// diffusers' randn_tensor: drawn on the generator's device, then moved to the sample's.
inline Tensor randn_like(const Tensor& like, at::Generator* gen) {
  if (!gen) return at::randn(like.sizes(), like.options());
  return at::randn(like.sizes(), *gen, like.options().device(gen->device())).to(like.device());
}

inline void check_num_steps(int n) {
  if (n < 1) throw Error(ErrorKind::invalid_argument, "set_timesteps: num_inference_steps must be >= 1");
}

// diffusers' stretch_shift_to_terminal, on the float64 sigmas.
inline void stretch_to_terminal(Doubles& s, std::optional<double> terminal) {
  if (!terminal || *terminal == 0) return;
  const double scale = (1 - s.back()) / (1 - *terminal);
  for (double& v : s) v = 1 - (1 - v) / scale;
}

// Shared plumbing: the name, the schedule tensors, and clone_fresh() from the immutable config.
// Self provides kName (the diffusers class name), read_config(ParamReader&) -> Config and,
// where keys depend on each other, check_config(const ParamReader&, Config&) (run once every
// key is read: cross-key checks and derived values).
template <typename Self, typename Config>
class Base : public Scheduler {
 public:
  using ConfigType = Config;
  explicit Base(Config c) : c_(std::move(c)) {}
  std::string_view name() const noexcept override { return Self::kName; }
  static void check_config(const ParamReader&, Config&) {}
  const Tensor& timesteps() const override { return timesteps_; }
  const Tensor& sigmas() const override { return sigmas_; }
  std::unique_ptr<Scheduler> clone_fresh() const override { return std::make_unique<Self>(c_); }

 protected:
  Config c_;
  Tensor timesteps_, sigmas_;
};

// The construction preamble every scheduler shares: read its diffusers config keys, refuse
// unknown ones, check the keys against each other, build it. Error(invalid_argument) naming
// the scheduler and the key.
template <typename S>
std::unique_ptr<Scheduler> make_from_params(const SchedulerParams& params) {
  ParamReader p(S::kName, params);
  typename S::ConfigType c = S::read_config(p);
  p.finish();
  S::check_config(p, c);
  return std::make_unique<S>(std::move(c));
}

// The registered factories (scheduler.cpp's registry), one file each.
std::unique_ptr<Scheduler> make_flow_match(const SchedulerParams& params);      // flow_match_euler.cpp
std::unique_ptr<Scheduler> make_ddim(const SchedulerParams& params);            // ddim.cpp
std::unique_ptr<Scheduler> make_euler_discrete(const SchedulerParams& params);  // euler_discrete.cpp
std::unique_ptr<Scheduler> make_unipc(const SchedulerParams& params);           // unipc.cpp
// FlowMatchEuler on a pipeline's own sigmas (LTXPipeline), chosen by make_flow_match when the
// params name a "sigma_schedule" (flow_match_sigmas.cpp).
bool wants_pipeline_sigmas(const SchedulerParams& params);
std::unique_ptr<Scheduler> make_flow_match_pipeline_sigmas(const SchedulerParams& params);

}  // namespace vgen::scheduler_detail
