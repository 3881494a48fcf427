#include "stages/schedulers/scheduler.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "runtime/errors.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

namespace {

using json = nlohmann::json;
using vgen::ErrorKind;
using vgen::SchedulerParams;

// Runs fn, expecting Error(invalid_argument) whose message mentions `needle`.
template <typename Fn>
void check_invalid(Fn&& fn, const std::string& needle) {
  try {
    fn();
    FAIL("expected vgen::Error(invalid_argument) mentioning " << needle);
  } catch (const vgen::Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

SchedulerParams params_from_json(const json& j) {
  SchedulerParams p;
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) {
      p[key] = std::monostate{};
    } else if (v.is_boolean()) {
      p[key] = v.get<bool>();
    } else if (v.is_number()) {
      p[key] = v.get<double>();
    } else if (v.is_string()) {
      p[key] = v.get<std::string>();
    } else if (v.is_array()) {
      p[key] = v.get<std::vector<double>>();
    }
  }
  return p;
}

at::Tensor tensor_from(const json& values, const std::vector<int64_t>& shape, at::ScalarType dtype) {
  const auto v = values.get<std::vector<double>>();
  return at::tensor(at::ArrayRef<double>(v), at::kDouble).reshape(shape).to(dtype);
}

// Largest |a - b| / max(1, |b|) over all entries: relative for large values, absolute near 0.
struct ErrorTracker {
  double worst = 0;
  std::string where;
  void compare(const at::Tensor& got, const json& want, const std::string& what) {
    const at::Tensor g = got.to(at::kDouble).contiguous().flatten();
    const auto w = want.get<std::vector<double>>();
    REQUIRE_MESSAGE(g.numel() == static_cast<int64_t>(w.size()), what);
    const double* gp = g.data_ptr<double>();
    for (size_t k = 0; k < w.size(); ++k) {
      const double err = std::fabs(gp[k] - w[k]) / std::max(1.0, std::fabs(w[k]));
      if (!(err <= worst)) {  // also catches NaN
        worst = std::isnan(err) ? INFINITY : err;
        where = what + "[" + std::to_string(k) + "]";
      }
    }
  }
};

json load_reference() {
  const char* python = std::getenv("VGEN_PYTHON");
  const char* source = std::getenv("VGEN_SOURCE_DIR");
  if (!python || !*python || !source || !*source) return nullptr;
  const auto out = std::filesystem::temp_directory_path() /
                   ("vgen_scheduler_reference_" + std::to_string(::getpid()) + ".json");
  const std::string cmd = std::string("\"") + python + "\" \"" + source +
                          "/tools/reference/scheduler_reference.py\" --out \"" + out.string() + "\"";
  const int rc = std::system(cmd.c_str());
  REQUIRE_MESSAGE(rc == 0, "reference generator failed: " << cmd);
  std::ifstream in(out);
  json doc = json::parse(in);
  std::filesystem::remove(out);
  return doc;
}

}  // namespace

TEST_CASE("registry lists the built-in schedulers and rejects unknown names") {
  const auto names = vgen::scheduler_names();
  for (const char* n : {"FlowMatchEulerDiscreteScheduler", "UniPCMultistepScheduler", "DDIMScheduler",
                        "EulerDiscreteScheduler"}) {
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
    CHECK(vgen::make_scheduler(n, {})->name() == n);
  }
  check_invalid([] { vgen::make_scheduler("PNDMScheduler", {}); }, "DDIMScheduler");
  check_invalid([] { vgen::make_scheduler("PNDMScheduler", {}); }, "PNDMScheduler");
}

TEST_CASE("parameters are checked by name") {
  check_invalid([] { vgen::make_scheduler("FlowMatchEulerDiscreteScheduler", {{"shfit", 3.0}}); }, "shfit");
  check_invalid([] { vgen::make_scheduler("DDIMScheduler", {{"flow_shift", 3.0}}); }, "flow_shift");
  check_invalid([] { vgen::make_scheduler("FlowMatchEulerDiscreteScheduler", {{"shift", std::string("x")}}); },
                "shift");
  check_invalid([] { vgen::make_scheduler("UniPCMultistepScheduler", {{"use_karras_sigmas", true}}); },
                "use_karras_sigmas");
  check_invalid([] { vgen::make_scheduler("DDIMScheduler", {{"timestep_spacing", std::string("odd")}}); },
                "timestep_spacing");
  check_invalid([] { vgen::make_scheduler("EulerDiscreteScheduler", {{"num_train_timesteps", 10.5}}); },
                "num_train_timesteps");
  // A pipeline's own sigmas (LTXPipeline) with dynamic shifting need the latent sequence length.
  check_invalid([] {
    vgen::make_scheduler("FlowMatchEulerDiscreteScheduler",
                         {{"sigma_schedule", std::string("one_to_one_over_n")}, {"use_dynamic_shifting", true}});
  }, "image_seq_len");
  check_invalid([] {
    vgen::make_scheduler("FlowMatchEulerDiscreteScheduler", {{"sigma_schedule", std::string("other")}});
  }, "sigma_schedule");
  check_invalid([] { vgen::make_scheduler("FlowMatchEulerDiscreteScheduler", {{"use_dynamic_shifting", true}}); },
                "use_dynamic_shifting");
  // diffusers' metadata keys and "off" values of unported features are accepted.
  CHECK_NOTHROW(vgen::make_scheduler("UniPCMultistepScheduler",
                                     {{"_class_name", std::string("UniPCMultistepScheduler")},
                                      {"solver_p", std::monostate{}},
                                      {"disable_corrector", std::vector<double>{}},
                                      {"use_karras_sigmas", false}}));
}

TEST_CASE("custom schedulers can be registered") {
  vgen::register_scheduler("MyFlow", [](const SchedulerParams& p) {
    return vgen::make_scheduler("FlowMatchEulerDiscreteScheduler", p);
  });
  auto s = vgen::make_scheduler("MyFlow", {{"shift", 2.0}});
  s->set_timesteps(4);
  CHECK(s->timesteps().size(0) == 4);
}

TEST_CASE("step misuse is rejected") {
  auto s = vgen::make_scheduler("UniPCMultistepScheduler", {{"use_flow_sigmas", true},
                                                            {"prediction_type", std::string("flow_prediction")}});
  const at::Tensor x = at::ones({1, 2, 2}, at::kDouble);
  check_invalid([&] { s->step(x, 0, x); }, "set_timesteps");
  s->set_timesteps(5);
  check_invalid([&] { s->step(x, 1, x); }, "in order");
  check_invalid([&] { s->step(x, 5, x); }, "step index");
  check_invalid([&] { s->set_timesteps(0); }, "num_inference_steps");
}

TEST_CASE("clone_fresh starts without multistep history") {
  SchedulerParams wan{{"use_flow_sigmas", true}, {"prediction_type", std::string("flow_prediction")},
                      {"flow_shift", 3.0}};
  auto a = vgen::make_scheduler("UniPCMultistepScheduler", wan);
  a->set_timesteps(6);
  const at::Tensor x0 = at::linspace(-1.0, 1.0, 12, at::kDouble).reshape({1, 3, 4});
  auto run = [&](vgen::Scheduler& s, int from, int to, at::Tensor x) {
    for (int i = from; i < to; ++i) x = s.step(at::sin(x * (i + 1)), i, x);
    return x;
  };
  const at::Tensor full = run(*a, 0, 6, x0);

  auto b = vgen::make_scheduler("UniPCMultistepScheduler", wan);
  b->set_timesteps(6);
  run(*b, 0, 3, x0);                 // b now holds history
  auto fresh = b->clone_fresh();     // ... its clone does not
  check_invalid([&] { fresh->step(x0, 0, x0); }, "set_timesteps");
  fresh->set_timesteps(6);
  CHECK(at::equal(run(*fresh, 0, 6, x0), full));
  b->set_timesteps(6);               // set_timesteps also clears history
  CHECK(at::equal(run(*b, 0, 6, x0), full));
}

TEST_CASE("steps are row-wise: a batch stepped together equals each row stepped alone (JobBatcher relies on it)") {
  const SchedulerParams flow{{"use_flow_sigmas", true}, {"prediction_type", std::string("flow_prediction")}, {"flow_shift", 3.0}};
  const std::pair<const char*, SchedulerParams> cases[] = {
      {"UniPCMultistepScheduler", flow},
      {"FlowMatchEulerDiscreteScheduler", {{"shift", 3.0}}},
      {"DDIMScheduler", {}},
      {"EulerDiscreteScheduler", {}},
  };
  for (const auto& [name, params] : cases) {
    CAPTURE(name);
    auto together = vgen::make_scheduler(name, params);
    const int steps = 6;
    together->set_timesteps(steps);
    // Three float32 latents of the Wan layout [1, C, F, H, W], stacked; "model" outputs that
    // differ per row and per step.
    at::manual_seed(3);
    const at::Tensor x0 = at::randn({3, 4, 2, 4, 4});
    auto model = [](const at::Tensor& x, int i) { return at::sin(x * (i + 1)) * 0.5; };
    at::Tensor x = x0.clone();
    for (int i = 0; i < steps; ++i) x = together->step(model(together->scale_model_input(x, i), i), i, x);
    for (std::int64_t r = 0; r < 3; ++r) {
      auto alone = vgen::make_scheduler(name, params);
      alone->set_timesteps(steps);
      at::Tensor y = x0.narrow(0, r, 1).clone();
      for (int i = 0; i < steps; ++i) y = alone->step(model(alone->scale_model_input(y, i), i), i, y);
      CHECK((x.narrow(0, r, 1) - y).abs().max().item<float>() <= 1e-6f);
    }
  }
}

TEST_CASE("a row's saved state resumes it bit-identically regrouped, and within 1e-4 alone (checkpoints rely on it)") {
  const SchedulerParams flow{{"use_flow_sigmas", true}, {"prediction_type", std::string("flow_prediction")}, {"flow_shift", 3.0}};
  const std::pair<const char*, SchedulerParams> cases[] = {
      {"UniPCMultistepScheduler", flow},
      {"UniPCMultistepScheduler", {{"solver_order", 3.0}}},
      {"FlowMatchEulerDiscreteScheduler", {{"shift", 3.0}}},
      {"DDIMScheduler", {}},
      {"EulerDiscreteScheduler", {}},
  };
  auto model = [](const at::Tensor& x, int i) { return at::sin(x * (i + 1)) * 0.5; };
  for (const auto& [name, params] : cases) {
    const std::string scheduler = name;
    CAPTURE(scheduler);
    const int steps = 7;
    at::manual_seed(5);
    const at::Tensor x0 = at::randn({2, 4, 2, 4, 4});
    auto a = vgen::make_scheduler(name, params);
    a->set_timesteps(steps);
    at::Tensor x = x0.clone();
    for (int i = 0; i < steps; ++i) x = a->step(model(a->scale_model_input(x, i), i), i, x);
    for (int stop : {1, 2, 4}) {
      CAPTURE(stop);
      auto b = vgen::make_scheduler(name, params);
      b->set_timesteps(steps);
      at::Tensor y = x0.clone();
      for (int i = 0; i < stop; ++i) y = b->step(model(b->scale_model_input(y, i), i), i, y);
      // Save both rows (copies, as a checkpoint file would hold), then resume them the other
      // way round in a fresh scheduler, and row 1 alone in another.
      std::vector<vgen::SchedulerRowState> saved;
      for (std::int64_t r = 0; r < 2; ++r) {
        auto row = b->save_row(r);
        for (auto& t : row.tensors)
          if (t.defined()) t = t.clone();
        saved.push_back(std::move(row));
      }
      auto swapped = vgen::make_scheduler(name, params);
      swapped->set_timesteps(steps);
      swapped->restore_rows(stop, {&saved[1], &saved[0]});
      at::Tensor z = at::cat({y.narrow(0, 1, 1), y.narrow(0, 0, 1)}).clone();
      for (int i = stop; i < steps; ++i) z = swapped->step(model(swapped->scale_model_input(z, i), i), i, z);
      CHECK(at::equal(z.narrow(0, 0, 1), x.narrow(0, 1, 1)));
      CHECK(at::equal(z.narrow(0, 1, 1), x.narrow(0, 0, 1)));
      auto alone = vgen::make_scheduler(name, params);
      alone->set_timesteps(steps);
      alone->restore_rows(stop, {&saved[1]});
      at::Tensor w = y.narrow(0, 1, 1).clone();
      for (int i = stop; i < steps; ++i) w = alone->step(model(alone->scale_model_input(w, i), i), i, w);
      // Alone (a batch of one) is close, not bit-identical: UniPC's corrector sums its earlier
      // points with einsum (as diffusers does), a matrix product whose kernel the math library
      // picks by batch size; measured 1.57e-5 at solver_order 3 on an Intel Xeon with AMX (0 on
      // the AMD EPYC machines before). Regrouped rows above stay bit-identical.
      CHECK((w - x.narrow(0, 1, 1)).abs().max().item<float>() <= 1e-4f);
    }
  }
}

TEST_CASE("saved states from different steps, or history for a memoryless scheduler, are refused") {
  const SchedulerParams flow{{"use_flow_sigmas", true}, {"prediction_type", std::string("flow_prediction")}, {"flow_shift", 3.0}};
  auto u = vgen::make_scheduler("UniPCMultistepScheduler", flow);
  u->set_timesteps(5);
  at::Tensor x = at::ones({1, 2, 2});
  x = u->step(x, 0, x);
  const auto after1 = u->save_row(0);
  x = u->step(x, 1, x);
  const auto after2 = u->save_row(0);
  auto v = vgen::make_scheduler("UniPCMultistepScheduler", flow);
  v->set_timesteps(5);
  check_invalid([&] { v->restore_rows(2, {&after1, &after2}); }, "different steps");
  check_invalid([&] { v->restore_rows(9, {&after2}); }, "resume at step 9");
  auto e = vgen::make_scheduler("FlowMatchEulerDiscreteScheduler", {});
  e->set_timesteps(5);
  check_invalid([&] { e->restore_rows(2, {&after2}); }, "no history");
  CHECK(e->resumable());
  CHECK_FALSE(vgen::make_scheduler("DDIMScheduler", {{"eta", 0.5}})->resumable());
  CHECK_FALSE(vgen::make_scheduler("FlowMatchEulerDiscreteScheduler", {{"stochastic_sampling", true}})->resumable());
}

TEST_CASE("parity with diffusers") {
  const json doc = load_reference();
  if (doc.is_null()) {
    MESSAGE("VGEN_PYTHON / VGEN_SOURCE_DIR not set: diffusers parity not checked");
    WARN(false);
    return;
  }
  MESSAGE("diffusers " << doc["diffusers_version"].get<std::string>() << ", torch "
                       << doc["torch_version"].get<std::string>());
  REQUIRE(doc["cases"].size() >= 12);
  at::set_num_threads(1);
  for (const auto& c : doc["cases"]) {
    const std::string name = c["name"];
    CAPTURE(name);
    const auto shape = c["sample_shape"].get<std::vector<int64_t>>();
    const int steps = c["num_inference_steps"];
    auto sched = vgen::make_scheduler(c["scheduler"].get<std::string>(), params_from_json(c["params"]));
    sched->set_timesteps(steps);

    ErrorTracker schedule;
    REQUIRE(sched->timesteps().size(0) == static_cast<int64_t>(c["timesteps"].size()));
    const bool int_steps = c["timesteps_dtype"] == "int64";
    CHECK(static_cast<int>(sched->timesteps().scalar_type()) == static_cast<int>(int_steps ? at::kLong : at::kFloat));
    schedule.compare(sched->timesteps(), c["timesteps"], "timesteps");
    if (!c["sigmas"].empty()) schedule.compare(sched->sigmas(), c["sigmas"], "sigmas");
    schedule.compare(at::scalar_tensor(sched->init_noise_sigma(), at::kDouble), json::array({c["init_noise_sigma"]}),
                     "init_noise_sigma");
    CHECK_MESSAGE(schedule.worst <= 1e-9, name << " schedule: " << schedule.worst << " at " << schedule.where);

    for (auto [dtype_name, dtype, tol] : {std::tuple{std::string("float64"), at::kDouble, 1e-9},
                                          std::tuple{std::string("float32"), at::kFloat, 1e-5}}) {
      auto s = sched->clone_fresh();
      s->set_timesteps(steps);
      const json& want = c["results"][dtype_name];
      std::optional<at::Generator> gen;
      if (!c["seed"].is_null()) gen = at::make_generator<at::CPUGeneratorImpl>(c["seed"].get<uint64_t>());
      at::Tensor x = tensor_from(c["sample"], shape, dtype);
      ErrorTracker err;
      for (int i = 0; i < s->num_inference_steps(); ++i) {
        err.compare(s->scale_model_input(x, i), want["scaled_inputs"][i], "scaled_input " + std::to_string(i));
        const at::Tensor out = tensor_from(c["model_outputs"][i], shape, dtype);
        x = s->step(out, i, x, gen ? &*gen : nullptr);
        CHECK(static_cast<int>(x.scalar_type()) == static_cast<int>(dtype));
        err.compare(x, want["steps"][i], "step " + std::to_string(i));
      }
      MESSAGE(name << " " << dtype_name << ": max error " << err.worst);
      CHECK_MESSAGE(err.worst <= tol, name << " " << dtype_name << ": " << err.worst << " at " << err.where);
    }
  }
}
