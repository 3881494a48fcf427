// Wan VACE (diffusers' WanVACEPipeline + WanVACETransformer3DModel) behind the model-family
// interface (stages/family.hpp), registered as "wan2.1-vace" in stages/builtin_families.cpp.
// It is the text-to-video family (stages/families/wan/wan_family.hpp: text, noise, guidance,
// decode) plus a control input the transformer takes beside the latents, built in prepare as
// WanVACEPipeline builds it:
//   video     the job's `video` (the control video: pose, depth, edges, a clip to inpaint), its
//             frames cut as video-to-video cuts them (they set the job's frame count), in
//             [-1, 1]; zeros without one.
//   mask      the job's `mask_video` (white: regenerate), (2m - 1 + 1) / 2 clamped; all ones
//             without one.
//   latents   [inactive; reactive] = the VAE encoder's posterior mean (normalised) of
//             video * (1 - b) and video * b, b = mask > 0.5: 32 channels.
//   refs      each reference image scaled into the frame (bilinear, aspect kept) on a white
//             canvas, VAE-encoded as one frame, paired with zeros (32 channels) and put in
//             front of the video's latent frames (the last given first, as diffusers prepends
//             them in order); the noise has one more latent frame per reference, and decode
//             drops them.
//   control   [latents; the mask's first channel packed 8 x 8 into 64 channels, nearest-exact
//             in time to the latent frames, zeros on the reference frames]: 96 channels.
// The transformer (tools/vgen_export/wan_vace.py) takes (x, t, context, control, scale) with
// each row's conditioning_scale for every VACE layer, so jobs with other scales share a call;
// jobs with another reference count have another latent shape, so another denoise group.
// Differences from diffusers, both in the reference image's path only: a reference whose sides
// are not multiples of 8 is first resized to the multiples below with swscale's Lanczos where
// diffusers uses PIL's (stages/media/image_input.hpp), and a job's frames are resized to its
// size as video-to-video does (diffusers keeps a smaller video's size, then fails on the shape).
// Ownership and threads: as WanFamily; prepare's module calls run on the compute thread.
#pragma once

#include "stages/families/wan/wan_family.hpp"

namespace vgen {

class WanVaceFamily final : public WanFamily {
 public:
  WanVaceFamily(ModelPackage package, const FamilyOptions& options);

  // The spec as WanFamily validates it; a strength other than the default is refused by name
  // (the video is a control video here, not where denoising starts).
  JobSpec validate(const boost::json::value& spec) const override;
  void decode(const std::string& device, const std::vector<FamilyJob*>& jobs) override;
  std::int64_t vace_layers() const { return layers_; }

 protected:
  void condition(const std::string& device, WanJob& job) override;
  std::vector<at::Tensor> extra_inputs(const std::vector<FamilyJob*>& jobs) const override;
  std::int64_t extra_latent_frames(const WanJob& job) const override;
  VideoUse video_use() const override { return VideoUse::control; }

 private:
  std::int64_t layers_ = 0;  // manifest vace.layers: one conditioning scale each
};

std::shared_ptr<Family> make_wan_vace_family(ModelPackage package, const FamilyOptions& options);

// A reference picture [3, h, w] in [0, 1] placed as diffusers does: in [-1, 1], scaled by
// min(H / h, W / w) (bilinear, align_corners false) and centred on a white [3, H, W] canvas.
at::Tensor wan_vace_reference_canvas(const at::Tensor& picture, int height, int width);

// The mask [1, 3, F, H, W] in [0, 1] packed as diffusers' prepare_masks: [1, 64, R + F', H/8, W/8].
at::Tensor wan_vace_packed_mask(const at::Tensor& mask, std::int64_t latent_frames, std::int64_t references, int spatial_scale);

}  // namespace vgen
