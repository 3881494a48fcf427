#include "stages/wan/wan_i2v_family.hpp"

#include "runtime/errors.hpp"

#include <ATen/ATen.h>

namespace vgen {

WanI2VFamily::WanI2VFamily(ModelPackage package, const FamilyOptions& options) : WanFamily(std::move(package), options) {
  for (const char* name : {"image_encoder", "vae_encoder"}) this->package().component(name);  // named if missing
}

std::shared_ptr<Family> make_wan_i2v_family(ModelPackage package, const FamilyOptions& options) {
  return std::make_shared<WanI2VFamily>(std::move(package), options);
}

namespace {

// Where a spec names its image. The job spec has no image field yet (the image-input work
// adds `image`, decoded by stages/image_input): until it does, no spec names one, every job
// through the runtime is refused by validate, naming the field, and tests set WanJob::image.
std::string job_image_path(const JobSpec&) { return {}; }

}  // namespace

JobSpec WanI2VFamily::validate(const boost::json::value& spec) const {
  auto parsed = WanFamily::validate(spec);
  if (job_image_path(parsed).empty())
    throw Error(ErrorKind::invalid_argument, "image: the " + package().family + " package needs an input image (--image PATH)");
  return parsed;
}

at::Tensor wan_job_image(const WanJob& job) {
  if (job.image.defined()) return job.image;
  throw Error(ErrorKind::invalid_argument, "image: this job has no input image");
}

at::Tensor wan_i2v_condition(const ModelPackage& p, const at::Tensor& mean) {
  const auto c = p.latent_channels;
  auto lat_mean = at::tensor(p.latents_mean, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto inv_std = 1.0 / at::tensor(p.latents_std, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto cond = (mean.to(at::kFloat) - lat_mean) * inv_std;  // diffusers' normalisation, in its order
  // The mask: one channel per pixel frame of a latent frame (temporal_scale of them); the
  // first latent frame holds the given image, the rest is to be generated.
  auto mask = at::zeros({1, p.temporal_scale, cond.size(2), cond.size(3), cond.size(4)}, at::kFloat);
  mask.narrow(2, 0, 1).fill_(1.0);
  return at::cat({mask, cond}, 1);
}

void WanI2VFamily::condition(const std::string& device, WanJob& job) {
  const auto& p = package();
  auto image = wan_job_image(job).to(at::kFloat);
  if (image.dim() != 3 || image.size(0) != 3 || image.size(1) != job.spec.height || image.size(2) != job.spec.width)
    throw Error(ErrorKind::invalid_argument, "image: must be fitted to the job's " + std::to_string(job.spec.width) + "x" +
                                                 std::to_string(job.spec.height) + " before conditioning");
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
