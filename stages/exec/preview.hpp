// Live previews of a denoising job: a cheap look at its current latents without a VAE call.
//
// LatentPreview projects each latent pixel's channels to an RGB colour with the package's
// manifest factors (preview.latent_rgb, fitted by least squares against the package's own VAE
// by tools/vgen_export/latent_preview.py; ComfyUI's latent2rgb idea):
//   rgb in [0, 1] = clamp(weight (3 x C) . latent + bias)
// over the loop's latents as they are between steps (no un-normalisation: the fit folds it in).
// The image is the job's middle latent frame (latent frame k shows output frame
// k * temporal_scale), upscaled bilinearly towards the output size but at most kMaxSide pixels
// on its longer side, encoded as PNG (libavcodec).
// attach_previews() hooks a job's FamilyJob::on_step so that every `every` steps (and at the
// last) the job gets a new JobPreview (report_preview, stages/exec/denoise_news.hpp: its event reaches the library's
// progress callback and the HTTP event stream).
//
// Threads: image() and render() are const and thread-safe; they run on the device's compute
// thread (inside on_step, between steps), block for the projection and the encode (well
// under a step of any real model), and are not cancellable (the loop checks between steps).
// Ownership: a LatentPreview is immutable and shared by the jobs of its package.
#pragma once

#include "runtime/job.hpp"
#include "stages/exec/denoise_news.hpp"
#include "stages/model/model_package.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vgen {

struct FamilyJob;

class LatentPreview {
 public:
  static constexpr int kMaxSide = 320;

  // The package's factors, or nullptr when its manifest has none (previews off for it).
  static std::shared_ptr<const LatentPreview> of_package(const ModelPackage& package);
  // weight: 3 x channels, row-major; bias: 3. Error(invalid_argument) on other sizes.
  LatentPreview(std::vector<double> weight, std::vector<double> bias, int channels, int temporal_scale, int spatial_scale);

  int middle_frame(const at::Tensor& latents) const;  // of [1, C, F', H', W']
  int decoded_frame(int latent_frame) const { return latent_frame * temporal_scale_; }
  // The latent frame's colours as [H' * scale, W' * scale, 3] float32 in [0, 1] on the CPU.
  at::Tensor image(const at::Tensor& latents, int latent_frame, int scale) const;
  // The upscale render() uses for latents of H' x W': spatial_scale, lowered to fit kMaxSide.
  int preview_scale(std::int64_t latent_height, std::int64_t latent_width) const;
  // The middle frame as a PNG JobPreview of `step` of `total`.
  std::shared_ptr<const JobPreview> render(const at::Tensor& latents, int step, int total) const;

 private:
  at::Tensor weight_;  // [3, C] float32
  at::Tensor bias_;    // [3, 1] float32
  int channels_, temporal_scale_, spatial_scale_;
};

// PNG bytes of an 8-bit RGB image ([H, W, 3] uint8, contiguous). Error(internal) from libav.
std::string encode_png(const std::uint8_t* rgb, int width, int height);

// Sets work.on_step so that `job` gets a preview after every `every` steps and after its last
// (of `steps`). Holds the job weakly: a finished job is not kept alive by its own payload.
// A preview that fails (libav) ends that job's previews; the job itself goes on.
void attach_previews(Job& job, FamilyJob& work, std::shared_ptr<const LatentPreview> preview, int every, int steps);

}  // namespace vgen
