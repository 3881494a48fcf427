#include "stages/families/hunyuan15/hunyuan15_i2v.hpp"

#include "runtime/errors.hpp"

#include <ATen/ATen.h>

namespace vgen {

RgbImage hunyuan15_fit_image(const RgbImage& image, int width, int height) {
  if (image.width <= 0 || image.height <= 0) throw_error(ErrorKind::invalid_argument, "image: the picture is empty");
  if (image.width == width && image.height == height) return image;
  // diffusers' integer arithmetic: the side that already fits is kept, the other follows the
  // picture's ratio (floor division), so the cut is never negative.
  const double ratio = static_cast<double>(width) / height;
  const double src_ratio = static_cast<double>(image.width) / image.height;
  const int src_w = ratio > src_ratio ? width : static_cast<int>(static_cast<std::int64_t>(image.width) * height / image.height);
  const int src_h = ratio <= src_ratio ? height : static_cast<int>(static_cast<std::int64_t>(image.height) * width / image.width);
  // Pasted at (width / 2 - src_w / 2, ...): for even sizes the same window as center_crop's.
  return center_crop(resize_rgb(image, src_w, src_h, ResizeFilter::lanczos), width, height);
}

Hunyuan15ImageInputs hunyuan15_image_inputs(const Module& vae_encoder, const Module& image_encoder, const RgbImage& fitted,
                                            double scaling_factor) {
  // from_blob does not own: the clone below is made before `fitted` can go away.
  auto picture = at::from_blob(const_cast<std::uint8_t*>(fitted.rgb.data()), {1, fitted.height, fitted.width, 3}, at::kByte)
                     .permute({0, 3, 1, 2})
                     .to(at::kFloat)
                     .div(255.0)
                     .contiguous();
  Hunyuan15ImageInputs out;
  // VideoProcessor.preprocess: x / 255 * 2 - 1 (normalize), then the VAE in its own dtype.
  out.condition = vae_encoder.forward({(picture * 2 - 1).to(vae_encoder.dtype())}).to(at::kCPU).to(at::kFloat) * scaling_factor;
  out.tokens = image_encoder.forward({picture.to(image_encoder.dtype())}).to(at::kCPU).to(at::kFloat);
  return out;
}

}  // namespace vgen
