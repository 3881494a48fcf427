#include "stages/families/family.hpp"

#include "runtime/errors.hpp"

#include <boost/json.hpp>

#include <ATen/ATen.h>

#include <any>

namespace vgen {

std::string Family::key_prefix() const { return package().family + "|" + package().id(); }

std::string Family::prepare_key(const FamilyJob&) const { return key_prefix(); }

void Family::begin_denoise(const std::vector<FamilyJob*>&, const std::string&) {}

std::string Family::decode_key(const FamilyJob& job) const {
  std::string k = key_prefix();
  for (auto d : job.state.latents.sizes()) k += "|" + std::to_string(d);
  return k;
}

Registry<FamilyFactory>& families() {
  static Registry<FamilyFactory> registry("model family");
  return registry;
}

std::shared_ptr<Family> load_family(const std::filesystem::path& package_dir, const FamilyOptions& options) {
  auto package = load_model_package(package_dir);
  if (!options.model_name.empty()) package.limits.model_name = options.model_name;
  auto make = families().get(package.family);  // an unknown family names the known ones
  auto family = make(std::move(package), options);
  if (!family) throw_error(ErrorKind::internal, "the model family factory returned nothing");
  return family;
}

const FamilyJob* find_family_job(const Job& job) {
  const auto* w = std::any_cast<std::shared_ptr<FamilyJob>>(&job.payload);
  return w ? w->get() : nullptr;
}

std::shared_ptr<FamilyJob> family_job(Job& job) {
  auto* w = std::any_cast<std::shared_ptr<FamilyJob>>(&job.payload);
  if (!w || !*w) throw_error(ErrorKind::internal, "job " + job.id() + " has no model-family state");
  return *w;
}

at::Tensor row_timesteps(const PredictCall& call) {
  auto t = call.timestep.to(at::kFloat).reshape({-1});
  const auto n = static_cast<std::int64_t>(call.jobs.size());
  if (t.numel() == 1 && n > 1) return t.expand({n}).contiguous();
  if (t.numel() != n)
    throw_error(ErrorKind::internal, "predict: " + std::to_string(t.numel()) + " timesteps for " + std::to_string(n) + " jobs");
  return t;
}

SchedulerParams scheduler_params_of(const boost::json::object& config) {
  SchedulerParams p;
  for (const auto& kv : config) {
    const auto& v = kv.value();
    SchedulerParam x;
    if (v.is_bool()) x = v.get_bool();
    else if (v.is_number()) x = v.to_number<double>();
    else if (v.is_string()) x = std::string(v.get_string());
    else if (v.is_array()) {
      std::vector<double> xs;
      for (const auto& e : v.get_array())
        if (e.is_number()) xs.push_back(e.to_number<double>());
      x = std::move(xs);
    }
    p.emplace(std::string(kv.key()), std::move(x));
  }
  return p;
}

}  // namespace vgen
