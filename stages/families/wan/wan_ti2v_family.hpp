// The Wan 2.2 TI2V-5B family (diffusers' WanPipeline and WanImageToVideoPipeline with
// expand_timesteps) behind the model-family interface (stages/family.hpp), registered as
// "wan2.2-ti2v" in stages/builtin_families.cpp. One package does text-to-video and, for a job
// that gives an image (optional, manifest inputs.image), image-to-video:
//   latents     z_dim 48 at 1/16 of the size (the Wan 2.2 VAE patchifies 2x2 inside its
//               exported encoder and decoder); the text path is WanFamily's.
//   timesteps   one per token (F' * H'/2 * W'/2 for patch (1, 2, 2)), the step's t everywhere,
//               and 0 on the first latent frame's tokens of an image-to-video job.
//   condition   image-to-video only: vae_encoder.pt on the image alone ([1,3,1,H,W] in [-1,1]),
//               normalised with latents_mean/std. It replaces latent frame 0 in every step's
//               transformer input and in the final latents before decoding (the scheduler
//               steps that frame freely in between, as diffusers does).
// Text- and image-to-video jobs of one shape share a denoise group: rows are independent.
// Ownership and threads: as WanFamily; prepare's module calls run on the compute thread.
#pragma once

#include "stages/families/wan/wan_family.hpp"

namespace vgen {

class WanTI2VFamily final : public WanFamily {
 public:
  // Error(invalid_argument) naming the field when the manifest lacks vae_encoder or its
  // transformer does not take per-token timesteps (transformer.timestep "per_token").
  WanTI2VFamily(ModelPackage package, const FamilyOptions& options);

  void decode(const std::string& device, const std::vector<FamilyJob*>& jobs) override;

 protected:
  void condition(const std::string& device, WanJob& job) override;
  at::Tensor denoiser_input(const std::vector<FamilyJob*>& jobs, const at::Tensor& x) const override;
  at::Tensor denoiser_timesteps(const std::vector<FamilyJob*>& jobs, const at::Tensor& x, const at::Tensor& t) const override;

 private:
  std::int64_t patch_h_ = 2, patch_w_ = 2;  // the transformer's spatial patch (manifest transformer.patch_size)
};

std::shared_ptr<Family> make_wan_ti2v_family(ModelPackage package, const FamilyOptions& options);

// Per-token timesteps [jobs, F' * H'/patch_h * W'/patch_w] for latents of `shape` ([jobs, C,
// F', H', W']): row j is t[j] everywhere, with 0 on the first latent frame's tokens where
// clean_first[j] (an image-to-video job).
at::Tensor wan_token_timesteps(const at::Tensor& t, at::IntArrayRef shape, std::int64_t patch_h, std::int64_t patch_w,
                               const std::vector<bool>& clean_first);

}  // namespace vgen
