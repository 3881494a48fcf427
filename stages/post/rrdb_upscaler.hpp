// The model-backed upscaler ("realesrgan" in post_processors()): a Real-ESRGAN-style RRDBNet
// exported from a user's checkpoint by `python -m vgen_export.post --realesrgan FILE -o DIR`
// into a post package: DIR/manifest.json ({"kind": "post", "variant": "realesrgan",
// "architecture": "rrdbnet", "scale": 2|4, "module": "upscaler.pt", ...}) and a TorchScript
// module that maps [N, 3, H, W] float32 RGB in [0, 1] to [N, 3, H x scale, W x scale].
//
// A job's factor may differ from the model's scale: a 4x model serves factor 2 by running once
// and shrinking by 2 (area average), a 2x model serves factor 4 by running twice.
// Large frames run in tiles (PostOptions::tile input pixels per side, each with tile_overlap
// pixels of context on every side that are computed and thrown away), so the memory a frame
// needs is bounded. A tile's output differs from the untiled frame's only through the context
// the overlap cuts off (RRDBNet's receptive field is wider than any practical overlap): the
// seam error is measured in tests/stages/post/test_rrdb_upscaler.cpp.
//
// This header includes ATen (api/ never includes it; model_set.cpp does, privately).
// Ownership: the upscaler shares its per-device modules through ModuleCache.
// Thread-safety: run() and upscale() may be called from any thread at once.
// Blocking: compute on the calling thread (a device's compute thread); not cancellable.
#pragma once

#include "stages/post/post_process.hpp"

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <string>

namespace vgen {

struct RrdbPackage {
  std::filesystem::path module;  // the TorchScript file
  int scale = 4;                 // what one pass multiplies each side by: 2 or 4
};
// Reads DIR/manifest.json; Error(invalid_argument) naming the file and field when it is not a
// realesrgan post package, Error(not_found) when it is missing.
RrdbPackage read_rrdb_package(const std::filesystem::path& dir);

class RrdbUpscaler final : public PostProcessor {
 public:
  explicit RrdbUpscaler(const PostOptions& options);  // reads the package (loads lazily, per device)
  PostKind kind() const override { return PostKind::upscale; }
  std::string name() const override { return "realesrgan"; }
  std::string identity() const override { return identity_; }  // realesrgan@<module sha256>/tile=T+O
  bool uses_device() const override { return true; }
  VideoFrames run(const VideoFrames& in, int factor, const std::string& device) const override;

  // `x` [N, 3, H, W] float32 in [0, 1] upscaled by `factor` (2 or 4) on `device`, in tiles of
  // `tile` input pixels (0: whole frames) with `overlap` pixels of context; on `device`, not clamped.
  at::Tensor upscale(const at::Tensor& x, int factor, const std::string& device, int tile, int overlap) const;
  int scale() const noexcept { return package_.scale; }

 private:
  at::Tensor one_pass(const at::Tensor& x, const std::string& device, int tile, int overlap) const;
  RrdbPackage package_;
  std::string identity_;
  PostOptions options_;
};

// Adds "realesrgan" to post_processors(); idempotent, thread-safe.
void register_rrdb_upscaler();

}  // namespace vgen
