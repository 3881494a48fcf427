#include "stages/families/wan/wan_i2v_family.hpp"

#include "runtime/errors.hpp"
#include "stages/families/family_kit.hpp"
#include "stages/media/image_input.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>


namespace vgen {

namespace {

// The manifest's image_conditioning.<key> as a bool (a family's own section of the parsed
// manifest), `absent` when it is not there; Error(invalid_argument) naming it when not a bool.
bool manifest_flag(const ModelPackage& p, const char* key, bool absent) {
  const auto* ic = p.manifest.if_contains("image_conditioning");
  const auto* v = ic && ic->is_object() ? ic->get_object().if_contains(key) : nullptr;
  if (!v) return absent;
  if (!v->is_bool())
    throw Error(ErrorKind::invalid_argument, "model package " + p.dir.string() + ": manifest field 'image_conditioning." +
                                                 key + "' must be true or false");
  return v->get_bool();
}

// A picture of the job ([3, H, W] float32 in [0, 1] at the job's size): `given` when set (tests,
// tools), else the file at `path` decoded and resized as diffusers' video processor does.
at::Tensor job_picture(const WanJob& job, const at::Tensor& given, const std::string& path, const std::string& field) {
  if (given.defined()) return given;
  const bool first = field == "image";
  if (path.empty() && !(first && job.first_frame))
    throw Error(ErrorKind::invalid_argument, field + ": this job has no " + (first ? "input image" : "last image"));
  // As diffusers' video processor: the picture resized to the video's size (Lanczos, aspect
  // ratio not kept; stages/image_input.hpp states how swscale differs from PIL). An extend
  // job's first frame comes fitted already.
  auto img = first ? job_first_frame(job) : decode_image_file(path, field);
  if (img.width != job.spec.width || img.height != job.spec.height) img = resize_rgb(img, job.spec.width, job.spec.height);
  auto rgb = at::from_blob(img.rgb.data(), {img.height, img.width, 3}, at::kByte);
  return rgb.permute({2, 0, 1}).to(at::kFloat).div(255.0).contiguous();  // copies out of img
}

at::Tensor fitted(const WanJob& job, at::Tensor image, const std::string& field) {
  image = image.to(at::kFloat);
  if (image.dim() != 3 || image.size(0) != 3 || image.size(1) != job.spec.height || image.size(2) != job.spec.width)
    throw Error(ErrorKind::invalid_argument, field + ": must be fitted to the job's " + std::to_string(job.spec.width) + "x" +
                                                 std::to_string(job.spec.height) + " before conditioning");
  return image;
}

}  // namespace

WanI2VFamily::WanI2VFamily(ModelPackage package, const FamilyOptions& options)
    : WanFamily(std::move(package), options),
      first_last_(manifest_flag(this->package(), "last_image", false)),
      image_encoder_(manifest_flag(this->package(), "image_encoder", true)) {
  this->package().component("vae_encoder");  // named if missing
  if (image_encoder_) this->package().component("image_encoder");
}

std::shared_ptr<Family> make_wan_i2v_family(ModelPackage package, const FamilyOptions& options) {
  return std::make_shared<WanI2VFamily>(std::move(package), options);
}

JobSpec WanI2VFamily::validate(const boost::json::value& spec) const {
  auto parsed = WanFamily::validate(spec);
  // The manifest's inputs.image ("required") already refuses a spec without one, naming the
  // field; a package exported without it must not run image-less either.
  if (!has_first_frame(parsed))
    throw Error(ErrorKind::invalid_argument, "image: required by the " + package().family + " package (--image PATH)");
  if (first_last_ && parsed.last_image.empty())
    throw Error(ErrorKind::invalid_argument, "last_image: required by the " + package().family + " package (--last-image PATH)");
  if (first_last_ && parsed.frames < package().temporal_scale + 1)
    throw Error(ErrorKind::invalid_argument, "frames: a first and a last frame need at least " +
                                                 std::to_string(package().temporal_scale + 1) + " frames");
  return parsed;
}

at::Tensor wan_job_image(const WanJob& job) { return job_picture(job, job.image, job.spec.image, "image"); }
at::Tensor wan_job_last_image(const WanJob& job) { return job_picture(job, job.last_image, job.spec.last_image, "last_image"); }

at::Tensor wan_fitted_image(const WanJob& job) { return fitted(job, wan_job_image(job), "image"); }
at::Tensor wan_fitted_last_image(const WanJob& job) { return fitted(job, wan_job_last_image(job), "last_image"); }

at::Tensor wan_i2v_condition(const ModelPackage& p, const at::Tensor& mean, bool last_frame) {
  auto cond = wan_normalised_latents(p, mean);
  // The mask: one channel per pixel frame of a latent frame (temporal_scale of them); the
  // first latent frame holds the given image, the rest is to be generated.
  auto mask = at::zeros({1, p.temporal_scale, cond.size(2), cond.size(3), cond.size(4)}, at::kFloat);
  mask.narrow(2, 0, 1).fill_(1.0);
  // The last pixel frame is the last of the last latent frame's temporal_scale channels
  // (diffusers' mask: the first frame repeated temporal_scale times, then one per frame).
  if (last_frame) mask.select(1, p.temporal_scale - 1).select(1, cond.size(2) - 1).fill_(1.0);
  return at::cat({mask, cond}, 1);
}

void WanI2VFamily::condition(const std::string& device, WanJob& job) {
  const auto& p = package();
  auto image = wan_fitted_image(job);
  const auto last = first_last_ ? wan_fitted_last_image(job) : at::Tensor();
  if (image_encoder_) {
    auto encoder = module("image_encoder", device);
    // One encoder call for both pictures; their tokens side by side, [1, 2N, D], as diffusers
    // stacks them for the transformer's position embedding.
    auto pictures = first_last_ ? at::stack({image, last}) : image.unsqueeze(0);
    auto tokens = encoder->forward({pictures.to(encoder->dtype())}).to(at::kCPU).to(at::kFloat);
    job.image_embeds = tokens.reshape({1, -1, tokens.size(2)});
  }
  // The condition video: the image in [-1, 1] as frame 0, zeros after it (and the last image last).
  auto video = at::zeros({1, 3, job.spec.frames, job.spec.height, job.spec.width}, at::kFloat);
  video.select(2, 0).copy_(image.unsqueeze(0) * 2 - 1);
  if (first_last_) video.select(2, job.spec.frames - 1).copy_(last.unsqueeze(0) * 2 - 1);
  auto vae = module("vae_encoder", device);
  auto mean = vae->forward({video.to(vae->dtype())}).to(at::kCPU);
  job.condition = wan_i2v_condition(p, mean, first_last_);
}

// The family's manifest name(s), registered by the build's register_builtin_families()
// (cmake/family.cmake).
void register_wan_i2v_family() {
  families().add("wan2.1-i2v", &make_wan_i2v_family);
  families().add("wan2.1-flf2v", &make_wan_i2v_family);  // and a last frame: manifest image_conditioning.last_image
  families().add("wan2.2-a14b-i2v", &make_wan_i2v_family);  // the two experts with the I2V condition, no image encoder
}

}  // namespace vgen
