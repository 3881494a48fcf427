#include "stages/exec/preview.hpp"

#include "stages/families/family.hpp"
#include "stages/media/libav.hpp"
#include "stages/model/frame_bytes.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

namespace vgen {

std::shared_ptr<const LatentPreview> LatentPreview::of_package(const ModelPackage& p) {
  if (p.preview_weight.empty()) return nullptr;
  return std::make_shared<const LatentPreview>(p.preview_weight, p.preview_bias, p.latent_channels, p.temporal_scale,
                                               p.spatial_scale);
}

LatentPreview::LatentPreview(std::vector<double> weight, std::vector<double> bias, int channels, int temporal_scale,
                             int spatial_scale)
    : channels_(channels), temporal_scale_(temporal_scale), spatial_scale_(spatial_scale) {
  if (channels < 1 || weight.size() != 3 * static_cast<std::size_t>(channels) || bias.size() != 3)
    throw_error(ErrorKind::invalid_argument, "preview: latent_rgb needs a 3 x " + std::to_string(channels) +
                                                 " weight and 3 biases (got " + std::to_string(weight.size()) + " and " +
                                                 std::to_string(bias.size()) + ")");
  weight_ = at::tensor(weight, at::kDouble).to(at::kFloat).view({3, channels});
  bias_ = at::tensor(bias, at::kDouble).to(at::kFloat).view({3, 1});
}

int LatentPreview::middle_frame(const at::Tensor& latents) const { return static_cast<int>((latents.size(2) - 1) / 2); }

int LatentPreview::preview_scale(std::int64_t latent_height, std::int64_t latent_width) const {
  const auto longer = std::max<std::int64_t>({latent_height, latent_width, 1});
  return static_cast<int>(std::clamp<std::int64_t>(kMaxSide / longer, 1, spatial_scale_));
}

at::Tensor LatentPreview::image(const at::Tensor& latents, int latent_frame, int scale) const {
  if (latents.dim() != 5 || latents.size(1) != channels_)
    throw_error(ErrorKind::internal, "preview: latents must be [1, " + std::to_string(channels_) + ", F, H, W]");
  const auto x = latents.select(0, 0).select(1, latent_frame).to(at::kCPU, at::kFloat);  // [C, H', W']
  const auto h = x.size(1), w = x.size(2);
  auto rgb = (at::matmul(weight_, x.reshape({channels_, h * w})) + bias_).view({1, 3, h, w});
  if (scale > 1) rgb = at::upsample_bilinear2d(rgb, {h * scale, w * scale}, /*align_corners=*/false);
  return rgb.clamp(0, 1).select(0, 0).permute({1, 2, 0}).contiguous();
}

std::shared_ptr<const JobPreview> LatentPreview::render(const at::Tensor& latents, int step, int total) const {
  const auto rgb = image(latents, middle_frame(latents), preview_scale(latents.size(3), latents.size(4)));
  const auto bytes = to_frame_bytes(rgb);
  auto out = std::make_shared<JobPreview>();
  out->step = step;
  out->total = total;
  out->height = static_cast<int>(bytes.size(0));
  out->width = static_cast<int>(bytes.size(1));
  out->content_type = "image/png";
  out->bytes = encode_png(bytes.data_ptr<std::uint8_t>(), out->width, out->height);
  return out;
}

std::string encode_png(const std::uint8_t* rgb, int width, int height) {
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
  if (!codec) throw_error(ErrorKind::internal, "preview: this FFmpeg has no PNG encoder");
  av::CodecContextPtr ctx(av::check_alloc(avcodec_alloc_context3(codec), "preview: PNG encoder context"));
  ctx->width = width;
  ctx->height = height;
  ctx->pix_fmt = AV_PIX_FMT_RGB24;
  ctx->time_base = {1, 1};
  ctx->compression_level = 1;  // zlib's fastest: a preview is made on the compute thread between steps
  av::check(avcodec_open2(ctx.get(), codec, nullptr), "preview: opening the PNG encoder");
  auto frame = av::alloc_frame();
  frame->format = AV_PIX_FMT_RGB24;
  frame->width = width;
  frame->height = height;
  av::check(av_frame_get_buffer(frame.get(), 0), "preview: frame buffer");
  for (int y = 0; y < height; ++y)
    std::memcpy(frame->data[0] + static_cast<std::ptrdiff_t>(y) * frame->linesize[0], rgb + static_cast<std::ptrdiff_t>(y) * width * 3,
                static_cast<std::size_t>(width) * 3);
  av::check(avcodec_send_frame(ctx.get(), frame.get()), "preview: encoding PNG");
  av::check(avcodec_send_frame(ctx.get(), nullptr), "preview: flushing the PNG encoder");
  auto packet = av::alloc_packet();
  av::check(avcodec_receive_packet(ctx.get(), packet.get()), "preview: reading the PNG");
  return std::string(reinterpret_cast<const char*>(packet->data), static_cast<std::size_t>(packet->size));
}

void attach_previews(Job& job, FamilyJob& work, std::shared_ptr<const LatentPreview> preview, int every, int steps) {
  if (!preview || every < 1) return;
  auto failed = std::make_shared<bool>(false);  // on_step runs on one compute thread at a time
  work.on_step = [weak = job.weak_from_this(), preview = std::move(preview), every, steps, failed](int step,
                                                                                                  const at::Tensor& latents) {
    const int done = step + 1;
    if (*failed || (done % every != 0 && done != steps)) return;
    auto job = weak.lock();
    if (!job) return;
    try {
      report_preview(*job, preview->render(latents, done, steps));
    } catch (const std::exception&) {
      *failed = true;  // a preview is a courtesy: the job goes on without them, never fails for one
    }
  };
}

}  // namespace vgen
