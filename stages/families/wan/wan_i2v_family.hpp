// The Wan 2.1 image-to-video family (diffusers' WanImageToVideoPipeline) behind the model-family
// interface (stages/family.hpp), registered as "wan2.1-i2v" in stages/builtin_families.cpp.
// It is the text-to-video family (stages/wan/wan_family.hpp: text, noise, guidance, decode)
// plus the job's image, turned in prepare into:
//   image_embeds  image_encoder.pt on the image [1,3,H,W] in [0,1] (CLIP's resize, crop and
//                 normalisation are inside the module): the tokens of the transformer's image
//                 cross-attention, the same for the cond and uncond rows;
//   condition     [mask; (mean - latents_mean) / latents_std] where mean = vae_encoder.pt on
//                 [2 image - 1, zeros...] (F frames) and the mask is 1 on latent frame 0:
//                 concatenated to the latents' channels at every step (36 = 16 + 4 + 16).
// First-last-frame (Wan 2.1 FLF2V, "wan2.1-flf2v": manifest image_conditioning.last_image, a
// transformer with pos_embed_seq_len): the job's last_image as well (required), as diffusers
// does with `last_image`: image_embeds = the two images' tokens [1, 2N, D] (first, then last),
// the condition video [image, zeros, last_image] and the mask also 1 on the last pixel frame
// (latent frame F'-1, its last of temporal_scale channels).
// Two experts (Wan 2.2 I2V-A14B, "wan2.2-a14b-i2v": manifest `experts` and
// image_conditioning.image_encoder false): no image encoder and no image_embeds; the condition
// above enters through the channels alone, and WanFamily switches transformer / transformer_2
// at boundary_ratio as for "wan2.2-a14b-t2v" (one expert-switching code for both).
// Jobs of one denoise group each carry their own image (rows are independent in the call).
// Ownership and threads: as WanFamily; prepare's module calls run on the compute thread.
#pragma once

#include "stages/families/wan/wan_family.hpp"

namespace vgen {

class WanI2VFamily final : public WanFamily {
 public:
  WanI2VFamily(ModelPackage package, const FamilyOptions& options);

  // The spec as WanFamily validates it, and an image: Error(invalid_argument) naming "image"
  // (and, first-last-frame, "last_image" or "frames" below 5).
  JobSpec validate(const boost::json::value& spec) const override;
  bool first_last_frame() const { return first_last_; }
  bool image_tokens() const { return image_encoder_; }  // false: the condition channels alone (A14B)

 protected:
  void condition(const std::string& device, WanJob& job) override;

 private:
  bool first_last_ = false;     // manifest image_conditioning.last_image
  bool image_encoder_ = true;   // manifest image_conditioning.image_encoder (absent: true, Wan 2.1)
};

std::shared_ptr<Family> make_wan_i2v_family(ModelPackage package, const FamilyOptions& options);

// The job's first frame, [3, H, W] float32 in [0, 1] at the job's size: job.image when it is
// set (tests, tools), else the spec's image file decoded (stages/image_input) and resized to
// the job's size. Error(invalid_argument) naming "image" when the job has none or it does not
// decode. Reads the file: call it on the compute thread (prepare).
at::Tensor wan_job_image(const WanJob& job);
// The same for the job's last frame (job.last_image, else the spec's last_image; "last_image").
at::Tensor wan_job_last_image(const WanJob& job);

// The condition for `image` ([3, H, W] in [0, 1]) at `frames` frames, from the package's VAE
// encoder output `mean` ([1, C, F', H', W']): [1, temporal_scale + C, F', H', W']. With
// `last_frame`, the mask also marks the last pixel frame as given.
at::Tensor wan_i2v_condition(const ModelPackage& package, const at::Tensor& mean, bool last_frame = false);


// The job's image (last image) checked against its size (Error(invalid_argument) naming the field otherwise).
at::Tensor wan_fitted_image(const WanJob& job);
at::Tensor wan_fitted_last_image(const WanJob& job);

}  // namespace vgen
