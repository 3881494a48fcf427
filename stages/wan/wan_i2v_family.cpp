#include "stages/wan/wan_i2v_family.hpp"

#include "runtime/errors.hpp"
#include "stages/image_input.hpp"

#include <ATen/ATen.h>

namespace vgen {

WanI2VFamily::WanI2VFamily(ModelPackage package, const FamilyOptions& options) : WanFamily(std::move(package), options) {
  for (const char* name : {"image_encoder", "vae_encoder"}) this->package().component(name);  // named if missing
}

std::shared_ptr<Family> make_wan_i2v_family(ModelPackage package, const FamilyOptions& options) {
  return std::make_shared<WanI2VFamily>(std::move(package), options);
}

JobSpec WanI2VFamily::validate(const boost::json::value& spec) const {
  auto parsed = WanFamily::validate(spec);
  // The manifest's inputs.image ("required") already refuses a spec without one, naming the
  // field; a package exported without it must not run image-less either.
  if (parsed.image.empty())
    throw Error(ErrorKind::invalid_argument, "image: required by the " + package().family + " package (--image PATH)");
  return parsed;
}

at::Tensor wan_job_image(const WanJob& job) {
  if (job.image.defined()) return job.image;
  if (job.spec.image.empty()) throw Error(ErrorKind::invalid_argument, "image: this job has no input image");
  // As diffusers' video processor: the picture resized to the video's size (Lanczos, aspect
  // ratio not kept; stages/image_input.hpp states how swscale differs from PIL).
  auto img = decode_image_file(job.spec.image, "image");
  if (img.width != job.spec.width || img.height != job.spec.height) img = resize_rgb(img, job.spec.width, job.spec.height);
  auto rgb = at::from_blob(img.rgb.data(), {img.height, img.width, 3}, at::kByte);
  return rgb.permute({2, 0, 1}).to(at::kFloat).div(255.0).contiguous();  // copies out of img
}

at::Tensor wan_normalised_latents(const ModelPackage& p, const at::Tensor& mean) {
  const auto c = p.latent_channels;
  auto lat_mean = at::tensor(p.latents_mean, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto inv_std = 1.0 / at::tensor(p.latents_std, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  return (mean.to(at::kFloat) - lat_mean) * inv_std;  // diffusers' normalisation, in its order
}

at::Tensor wan_fitted_image(const WanJob& job) {
  auto image = wan_job_image(job).to(at::kFloat);
  if (image.dim() != 3 || image.size(0) != 3 || image.size(1) != job.spec.height || image.size(2) != job.spec.width)
    throw Error(ErrorKind::invalid_argument, "image: must be fitted to the job's " + std::to_string(job.spec.width) + "x" +
                                                 std::to_string(job.spec.height) + " before conditioning");
  return image;
}

at::Tensor wan_i2v_condition(const ModelPackage& p, const at::Tensor& mean) {
  auto cond = wan_normalised_latents(p, mean);
  // The mask: one channel per pixel frame of a latent frame (temporal_scale of them); the
  // first latent frame holds the given image, the rest is to be generated.
  auto mask = at::zeros({1, p.temporal_scale, cond.size(2), cond.size(3), cond.size(4)}, at::kFloat);
  mask.narrow(2, 0, 1).fill_(1.0);
  return at::cat({mask, cond}, 1);
}

void WanI2VFamily::condition(const std::string& device, WanJob& job) {
  const auto& p = package();
  auto image = wan_fitted_image(job);
  auto encoder = module("image_encoder", device);
  job.image_embeds = encoder->forward({image.unsqueeze(0).to(encoder->dtype())}).to(at::kCPU).to(at::kFloat);
  // The condition video: the image in [-1, 1] as frame 0, zeros after it.
  auto video = at::zeros({1, 3, job.spec.frames, job.spec.height, job.spec.width}, at::kFloat);
  video.select(2, 0).copy_(image.unsqueeze(0) * 2 - 1);
  auto vae = module("vae_encoder", device);
  auto mean = vae->forward({video.to(vae->dtype())}).to(at::kCPU);
  job.condition = wan_i2v_condition(p, mean);
}

}  // namespace vgen
