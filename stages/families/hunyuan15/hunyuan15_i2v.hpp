// HunyuanVideo 1.5 image-to-video's picture inputs (diffusers' HunyuanVideo15ImageToVideoPipeline),
// what the hunyuan15 family adds to a job when its package says inputs.image "required":
//
//  fit       the picture fitted to the job's size as the pipeline's video processor does
//            (VaeImageProcessor.resize, resize_mode "crop"): scaled to cover width x height
//            keeping its aspect ratio (Lanczos), then the centre cut out. Untouched when the
//            size already matches. The pipeline picks that size itself from the picture's
//            aspect ratio (buckets around transformer target_size); vgen renders the job's
//            height and width, so a job asking the bucket's size gets the pipeline's video.
//  condition the fitted picture in [-1, 1] through vae_encoder.pt (the posterior's mode, as
//            retrieve_latents(sample_mode="argmax")) times the VAE's scaling factor: latent
//            frame 0 of the transformer's condition channels (the module adds the zero frames
//            after it and the mask, 1 on frame 0).
//  tokens    the fitted picture in [0, 1] through image_encoder.pt (SiglipImageProcessor's resize
//            and normalisation inside the module, then SigLIP's last hidden state): the image
//            tokens the transformer attends to, the same for a job's unconditional and
//            conditional rows.
// resize_rgb is libswscale, not PIL (stages/media/image_input.hpp): a picture that needs a resize
// is close to diffusers', not equal; one at the job's size is exact.
// Pure functions of their arguments and the modules (which are immutable): thread-safe; they
// run the modules on the calling thread (a compute thread). No cancellation. Includes LibTorch.
#pragma once

#include "stages/media/image_input.hpp"
#include "stages/model/model_backend.hpp"

#include <ATen/Tensor.h>

namespace vgen {

// VaeImageProcessor._resize_and_crop: Error(invalid_argument) naming "image" for an empty picture.
RgbImage hunyuan15_fit_image(const RgbImage& image, int width, int height);

struct Hunyuan15ImageInputs {
  at::Tensor condition;  // [1, C, 1, H/16, W/16] float32 on the CPU: mode x scaling_factor
  at::Tensor tokens;     // [1, N, Di] float32 on the CPU
};

// `fitted` is at the job's size already (hunyuan15_fit_image).
Hunyuan15ImageInputs hunyuan15_image_inputs(const Module& vae_encoder, const Module& image_encoder, const RgbImage& fitted,
                                            double scaling_factor);

}  // namespace vgen
