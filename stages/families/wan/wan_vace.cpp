// Wan VACE (diffusers 0.42.1 WanVACEPipeline): the control input, in diffusers' order of
// operations (stages/families/wan/wan_vace.hpp states the contract).
#include "stages/families/wan/wan_vace.hpp"

#include "runtime/errors.hpp"
#include "stages/media/image_input.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <algorithm>
#include <cmath>

namespace vgen {

namespace {

WanJob& wan(FamilyJob& job) { return static_cast<WanJob&>(job); }

std::int64_t manifest_layers(const ModelPackage& p) {
  const auto* v = p.manifest.if_contains("vace");
  const auto* layers = v && v->is_object() ? v->get_object().if_contains("layers") : nullptr;
  if (!layers || !layers->is_array() || layers->get_array().empty())
    throw Error(ErrorKind::invalid_argument, "model package " + p.dir.string() + ": manifest field 'vace.layers' must be a non-empty array");
  return static_cast<std::int64_t>(layers->get_array().size());
}

// The job's reference pictures, [3, h, w] in [0, 1] each: given ones (tests, tools), else the
// files decoded. diffusers' image processor first resizes a picture to the multiples of 8 below
// its sides (PIL Lanczos; a no-op when they are multiples already), swscale's Lanczos here.
std::vector<at::Tensor> job_references(const WanJob& job, int spatial_scale) {
  if (!job.reference_images.empty()) return job.reference_images;
  std::vector<at::Tensor> out;
  for (std::size_t i = 0; i < job.spec.reference_images.size(); ++i) {
    auto img = decode_image_file(job.spec.reference_images[i], "reference_images[" + std::to_string(i) + "]");
    const int w = std::max(spatial_scale, img.width / spatial_scale * spatial_scale);
    const int h = std::max(spatial_scale, img.height / spatial_scale * spatial_scale);
    if (w != img.width || h != img.height) img = resize_rgb(img, w, h);
    auto rgb = at::from_blob(img.rgb.data(), {img.height, img.width, 3}, at::kByte);
    out.push_back(rgb.permute({2, 0, 1}).to(at::kFloat).div(255.0).contiguous());  // copies out of img
  }
  return out;
}

}  // namespace

WanVaceFamily::WanVaceFamily(ModelPackage package, const FamilyOptions& options)
    : WanFamily(std::move(package), options), layers_(manifest_layers(this->package())) {
  this->package().component("vae_encoder");  // named if missing
}

std::shared_ptr<Family> make_wan_vace_family(ModelPackage package, const FamilyOptions& options) {
  return std::make_shared<WanVaceFamily>(std::move(package), options);
}

JobSpec WanVaceFamily::validate(const boost::json::value& spec) const {
  auto parsed = WanFamily::validate(spec);
  // to_json writes the default strength back for any job with a video: only another value is a
  // video-to-video request this package cannot honour.
  if (parsed.strength != package().defaults.strength)
    throw Error(ErrorKind::invalid_argument, "strength: the " + package().family +
                                                 " package takes its video as a control video; strength is for video-to-video");
  return parsed;
}

at::Tensor wan_vace_reference_canvas(const at::Tensor& picture, int height, int width) {
  auto image = (picture.to(at::kFloat) * 2 - 1).unsqueeze(0);  // the image processor's normalisation
  const double ih = static_cast<double>(image.size(2)), iw = static_cast<double>(image.size(3));
  const double scale = std::min(height / ih, width / iw);  // Python floats: doubles
  const auto nh = static_cast<std::int64_t>(ih * scale), nw = static_cast<std::int64_t>(iw * scale);
  auto resized = at::upsample_bilinear2d(image, {nh, nw}, /*align_corners=*/false).squeeze(0);
  auto canvas = at::ones({3, height, width}, at::kFloat);
  const auto top = (height - nh) / 2, left = (width - nw) / 2;
  canvas.narrow(1, top, nh).narrow(2, left, nw).copy_(resized);
  return canvas;
}

at::Tensor wan_vace_packed_mask(const at::Tensor& mask, std::int64_t latent_frames, std::int64_t references, int s) {
  const auto f = mask.size(2), h = mask.size(3) / s, w = mask.size(4) / s;
  auto m = mask[0][0].reshape({f, h, s, w, s}).permute({2, 4, 0, 1, 3}).reshape({s * s, f, h, w});
  m = at::_upsample_nearest_exact3d(m.unsqueeze(0), {latent_frames, h, w}, std::nullopt, std::nullopt, std::nullopt);
  if (references > 0) m = at::cat({at::zeros({1, s * s, references, h, w}, m.options()), m}, 2);
  return m;
}

std::int64_t WanVaceFamily::extra_latent_frames(const WanJob& job) const {
  return static_cast<std::int64_t>(job.reference_images.empty() ? job.spec.reference_images.size() : job.reference_images.size());
}

void WanVaceFamily::condition(const std::string& device, WanJob& job) {
  const auto& p = package();
  const auto frames = job.spec.frames, height = job.spec.height, width = job.spec.width;
  const bool has_video = job.video.defined() || !job.spec.video.empty();
  // [F, 3, H, W] in [0, 1] -> [1, 3, F, H, W] in [-1, 1], as preprocess_video normalises.
  auto video = has_video ? (wan_job_video(job, p.temporal_scale).permute({1, 0, 2, 3}).unsqueeze(0) * 2 - 1).contiguous()
                         : at::zeros({1, 3, frames, height, width}, at::kFloat);
  at::Tensor mask;
  if (job.mask_video.defined() || !job.spec.mask_video.empty()) {
    auto m = wan_video_frames(job, job.mask_video, job.spec.mask_video, "mask_video", p.temporal_scale);
    if (m.size(0) != video.size(2))
      throw Error(ErrorKind::invalid_argument, "mask_video: " + std::to_string(m.size(0)) + " frames; the control video has " +
                                                   std::to_string(video.size(2)));
    m = m.permute({1, 0, 2, 3}).unsqueeze(0) * 2 - 1;
    mask = ((m + 1) / 2).clamp(0, 1);  // the pipeline's, after the image processor's [-1, 1]
  } else {
    mask = at::ones_like(video);
  }
  auto vae = module("vae_encoder", device);
  // prepare_video_latents: the inactive and reactive parts in one encoder call (rows are
  // independent), each normalised as the denoiser sees latents.
  const auto given = at::where(mask > 0.5, 1.0, 0.0).to(at::kFloat);
  const auto parts = at::cat({video * (1 - given), video * given}, 0);
  auto encoded = wan_normalised_latents(p, vae->forward({parts.to(vae->dtype())}).to(at::kCPU));
  auto latents = at::cat({encoded.narrow(0, 0, 1), encoded.narrow(0, 1, 1)}, 1);
  const auto latent_frames = latents.size(2);
  const auto references = job_references(job, p.spatial_scale);
  if (!references.empty()) {
    std::vector<at::Tensor> canvases;
    for (const auto& r : references) canvases.push_back(wan_vace_reference_canvas(r, height, width).unsqueeze(1));  // [3, 1, H, W]
    auto refs = wan_normalised_latents(p, vae->forward({at::stack(canvases).to(vae->dtype())}).to(at::kCPU));  // [R, C, 1, h, w]
    refs = at::cat({refs, at::zeros_like(refs)}, 1);
    // Each reference goes in front of what is there: the last one given ends up first.
    std::vector<at::Tensor> order;
    for (auto i = refs.size(0); i-- > 0;) order.push_back(refs.narrow(0, i, 1));
    order.push_back(latents);
    latents = at::cat(order, 2);
  }
  const auto packed = wan_vace_packed_mask(mask, latent_frames, static_cast<std::int64_t>(references.size()), p.spatial_scale);
  job.control = at::cat({latents, packed}, 1);
  if (job.control.size(2) != job.state.latents.size(2))
    throw Error(ErrorKind::internal, "VACE control: " + std::to_string(job.control.size(2)) + " latent frames for " +
                                         std::to_string(job.state.latents.size(2)) + " of noise");
  // Decoded from files: not needed past here, and a full clip in float32 is large.
  if (!job.spec.video.empty()) job.video = at::Tensor();
  if (!job.spec.mask_video.empty()) job.mask_video = at::Tensor();
}

std::vector<at::Tensor> WanVaceFamily::extra_inputs(const std::vector<FamilyJob*>& jobs) const {
  std::vector<at::Tensor> controls, scales;
  for (auto* j : jobs) {
    controls.push_back(wan(*j).control);
    scales.push_back(at::full({1, layers_}, j->spec.conditioning_scale, at::kFloat));
  }
  auto control = controls.size() == 1 ? controls[0] : at::cat(controls, 0);
  return {control, at::cat(scales, 0)};
}

// The reference frames are the latents' first ones: decoded without them, as diffusers does.
void WanVaceFamily::decode(const std::string& device, const std::vector<FamilyJob*>& jobs) {
  std::vector<at::Tensor> full;
  for (auto* j : jobs) {
    full.push_back(j->state.latents);
    const auto r = extra_latent_frames(wan(*j));
    j->state.latents = j->state.latents.narrow(2, r, j->state.latents.size(2) - r);
  }
  auto restore = [&] {
    for (std::size_t i = 0; i < jobs.size(); ++i) jobs[i]->state.latents = full[i];
  };
  try {
    WanFamily::decode(device, jobs);
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

// The family's manifest name(s), registered by the build's register_builtin_families()
// (cmake/family.cmake).
void register_wan_vace() {
  families().add("wan2.1-vace", &make_wan_vace_family);
}

}  // namespace vgen
