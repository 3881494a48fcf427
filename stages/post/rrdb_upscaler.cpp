#include "stages/post/rrdb_upscaler.hpp"

#include "runtime/errors.hpp"
#include "stages/model/frame_bytes.hpp"
#include "stages/model/model_package.hpp"  // sha256_file
#include "stages/model/model_backend.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <c10/core/InferenceMode.h>

#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

namespace vgen {

RrdbPackage read_rrdb_package(const std::filesystem::path& dir) {
  const auto m = read_post_manifest(dir, "realesrgan", "rrdbnet", "--realesrgan");
  RrdbPackage p;
  const auto* scale = m.fields.if_contains("scale");
  if (!scale || !scale->is_int64() || (scale->get_int64() != 2 && scale->get_int64() != 4)) m.bad("scale: must be 2 or 4");
  p.scale = static_cast<int>(scale->get_int64());
  m.require_module();
  p.module = m.module;
  return p;
}

RrdbUpscaler::RrdbUpscaler(const PostOptions& options) : package_(read_rrdb_package(options.upscale_model)), options_(options) {
  if (options.tile < 0 || options.tile_overlap < 0) throw_error(ErrorKind::invalid_argument, "post.tile and post.tile_overlap must be >= 0");
  // Tiles change the seams' pixels a little, so the tiling is part of what made the frames.
  identity_ = name() + "@" + sha256_file(package_.module) + "/tile=" + std::to_string(options.tile) + "+" +
              std::to_string(options.tile_overlap);
}

// Tiles cover the frame without overlapping; each runs with up to `overlap` more input pixels on
// every side (fewer at the frame's edges), and only its own part of the output is kept.
at::Tensor RrdbUpscaler::one_pass(const at::Tensor& x, const std::string& device, int tile, int overlap) const {
  const auto module = ModuleCache::instance().get("torchscript", package_.module, device, at::kFloat);
  const auto input = x.to(module->device());
  const int64_t h = input.size(2), w = input.size(3), s = package_.scale;
  if (tile <= 0 || (h <= tile && w <= tile)) return module->forward({input});
  auto out = at::empty({input.size(0), input.size(1), h * s, w * s}, input.options());
  for (int64_t y0 = 0; y0 < h; y0 += tile) {
    for (int64_t x0 = 0; x0 < w; x0 += tile) {
      const int64_t y1 = std::min<int64_t>(y0 + tile, h), x1 = std::min<int64_t>(x0 + tile, w);
      // With context; a 2x model unshuffles its input: keep every offset even.
      const int64_t cy0 = std::max<int64_t>(y0 - overlap, 0) & ~int64_t{1}, cx0 = std::max<int64_t>(x0 - overlap, 0) & ~int64_t{1};
      const int64_t cy1 = std::min<int64_t>(y1 + overlap, h), cx1 = std::min<int64_t>(x1 + overlap, w);
      const auto piece = module->forward({input.slice(2, cy0, cy1).slice(3, cx0, cx1).contiguous()});
      out.slice(2, y0 * s, y1 * s)
          .slice(3, x0 * s, x1 * s)
          .copy_(piece.slice(2, (y0 - cy0) * s, (y1 - cy0) * s).slice(3, (x0 - cx0) * s, (x1 - cx0) * s));
    }
  }
  return out;
}

at::Tensor RrdbUpscaler::upscale(const at::Tensor& x, int factor, const std::string& device, int tile, int overlap) const {
  if (factor != 2 && factor != 4) throw_error(ErrorKind::invalid_argument, "upscale: must be 2 or 4 (got " + std::to_string(factor) + ")");
  if (x.dim() != 4 || x.size(1) != 3) throw_error(ErrorKind::invalid_argument, "upscale: input must be [N, 3, H, W]");
  c10::InferenceMode guard;
  at::Tensor y = x;
  int reached = 1;
  while (reached < factor) {  // a 2x model twice for 4x
    y = one_pass(y, device, tile, overlap);  // tiles of the same input size each pass: the same memory
    reached *= package_.scale;
  }
  if (reached > factor) y = at::avg_pool2d(y, reached / factor);  // a 4x model for 2x: area average
  return y;
}

VideoFrames RrdbUpscaler::run(const VideoFrames& in, int factor, const std::string& device) const {
  in.validate();
  c10::InferenceMode guard;
  const auto bytes = at::from_blob(const_cast<std::uint8_t*>(in.rgb.data()), {in.count, in.height, in.width, 3}, at::kByte);
  VideoFrames out = VideoFrames::allocate(in.width * factor, in.height * factor, in.count, in.fps);
  for (int f = 0; f < in.count; ++f) {  // one frame at a time: the memory of one frame's activations
    const auto x = bytes[f].permute({2, 0, 1}).unsqueeze(0).to(at::kFloat).div(255.0);
    const auto y = upscale(x, factor, device, options_.tile, options_.tile_overlap);
    const auto rgb = to_frame_bytes(y[0].permute({1, 2, 0}));
    std::memcpy(out.frame(f), rgb.data_ptr<std::uint8_t>(), out.frame_bytes());
  }
  check_post_output(*this, in, factor, out);
  return out;
}

void register_rrdb_upscaler() {
  static std::once_flag once;
  std::call_once(once, [] {
    post_processors().add("realesrgan", [](const PostOptions& o) { return std::make_shared<const RrdbUpscaler>(o); });
  });
}

}  // namespace vgen
