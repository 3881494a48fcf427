#include "stages/families/wan/wan_ti2v_family.hpp"

#include "runtime/errors.hpp"
#include "stages/families/wan/wan_i2v_family.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>


namespace vgen {

namespace json = boost::json;

namespace {

const WanJob& wan(const FamilyJob& job) { return static_cast<const WanJob&>(job); }

// The manifest's `transformer` section (a family's own section of the parsed manifest; empty
// for a package built in memory: the defaults).
json::object transformer_section(const ModelPackage& p) {
  const auto* t = p.manifest.if_contains("transformer");
  return t && t->is_object() ? t->get_object() : json::object{};
}

}  // namespace

WanTI2VFamily::WanTI2VFamily(ModelPackage package, const FamilyOptions& options) : WanFamily(std::move(package), options) {
  const auto& p = this->package();
  p.component("vae_encoder");  // named if missing
  const auto where = "model package " + p.dir.string() + ": ";
  const auto t = transformer_section(p);
  if (!p.manifest.empty()) {  // a package read from disk states its timestep mode
    const auto* mode = t.if_contains("timestep");
    if (!mode || !mode->is_string() || mode->get_string() != "per_token")
      throw Error(ErrorKind::invalid_argument, where + "manifest field 'transformer.timestep' must be \"per_token\" for " + p.family);
  }
  if (const auto* patch = t.if_contains("patch_size")) {
    const auto* a = patch->if_array();
    if (!a || a->size() != 3 || !(*a)[1].is_int64() || !(*a)[2].is_int64() || (*a)[1].as_int64() < 1 || (*a)[2].as_int64() < 1)
      throw Error(ErrorKind::invalid_argument, where + "manifest field 'transformer.patch_size' must be three positive integers");
    patch_h_ = (*a)[1].as_int64();
    patch_w_ = (*a)[2].as_int64();
  }
  for (const auto patch : {patch_h_, patch_w_})
    if (p.limits.size_multiple % (p.spatial_scale * patch) != 0)
      throw Error(ErrorKind::invalid_argument, where + "resolution multiple_of must be a multiple of " +
                                                   std::to_string(p.spatial_scale * patch) + " (latent scale x transformer patch)");
}

std::shared_ptr<Family> make_wan_ti2v_family(ModelPackage package, const FamilyOptions& options) {
  return std::make_shared<WanTI2VFamily>(std::move(package), options);
}

at::Tensor wan_token_timesteps(const at::Tensor& t, at::IntArrayRef shape, std::int64_t patch_h, std::int64_t patch_w,
                               const std::vector<bool>& clean_first) {
  const auto rows = shape[0];
  if (t.numel() != rows || static_cast<std::int64_t>(clean_first.size()) != rows)
    throw Error(ErrorKind::internal, "wan_token_timesteps: one timestep and one flag per row expected");
  const auto per_frame = (shape[3] / patch_h) * (shape[4] / patch_w);
  auto ts = t.to(at::kFloat).reshape({rows, 1}).repeat({1, shape[2] * per_frame});
  for (std::int64_t r = 0; r < rows; ++r)
    if (clean_first[static_cast<std::size_t>(r)]) ts[r].narrow(0, 0, per_frame).zero_();  // mask (0) * t, as diffusers
  return ts;
}

// Image-to-video when the job has an image; text-to-video (no condition) otherwise.
void WanTI2VFamily::condition(const std::string& device, WanJob& job) {
  if (!job.image.defined() && !has_first_frame(job.spec)) return;
  auto image = wan_fitted_image(job);
  auto video = (image * 2 - 1).unsqueeze(0).unsqueeze(2);  // [1, 3, 1, H, W]: the image alone
  auto vae = module("vae_encoder", device);
  job.condition = wan_normalised_latents(package(), vae->forward({video.to(vae->dtype())}).to(at::kCPU));
}

// diffusers' (1 - mask) * condition + mask * latents with the mask 0 on frame 0: exactly the
// condition there and the latents elsewhere, so a copy gives the same values.
at::Tensor WanTI2VFamily::denoiser_input(const std::vector<FamilyJob*>& jobs, const at::Tensor& x) const {
  at::Tensor out = x;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const auto& c = wan(*jobs[j]).condition;
    if (!c.defined()) continue;
    if (out.is_same(x)) out = x.clone();
    out[static_cast<std::int64_t>(j)].narrow(1, 0, 1).copy_(c[0].narrow(1, 0, 1));
  }
  return out;
}

at::Tensor WanTI2VFamily::denoiser_timesteps(const std::vector<FamilyJob*>& jobs, const at::Tensor& x, const at::Tensor& t) const {
  std::vector<bool> clean;
  for (auto* j : jobs) clean.push_back(wan(*j).condition.defined());
  return wan_token_timesteps(t, x.sizes(), patch_h_, patch_w_, clean);
}

// The final latents of an image-to-video job carry the condition in frame 0 (diffusers does
// the same before decoding); applying it again on a retried decode changes nothing.
void WanTI2VFamily::decode(const std::string& device, const std::vector<FamilyJob*>& jobs) {
  for (auto* j : jobs) {
    const auto& c = wan(*j).condition;
    if (!c.defined()) continue;
    auto latents = j->state.latents.clone();
    latents.narrow(2, 0, 1).copy_(c.narrow(2, 0, 1));
    j->state.latents = latents;
  }
  WanFamily::decode(device, jobs);
}

// The family's manifest name(s), registered by the build's register_builtin_families()
// (cmake/family.cmake).
void register_wan_ti2v_family() {
  families().add("wan2.2-ti2v", &make_wan_ti2v_family);
}

}  // namespace vgen
