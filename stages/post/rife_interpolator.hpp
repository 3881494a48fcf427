// The model-backed interpolator ("rife" in post_processors()): RIFE v4.25/v4.26's IFNet exported
// from a user's checkpoint by `python -m vgen_export.post --rife FILE -o DIR` into a post
// package: DIR/manifest.json ({"kind": "post", "variant": "rife", "architecture": "ifnet",
// "timesteps": "any", "multiple": 64, "module": "interpolator.pt", ...}) and a TorchScript module
// that maps (img0, img1, timestep), [N, 3, H, W] float32 RGB in [0, 1] and [N] times in (0, 1),
// to the frames at those times [N, 3, H, W]; it pads to its multiple and crops by itself.
//
// Factor f: each gap between two frames gets the frames at t = 1/f .. (f-1)/f, each made from
// the pair directly (IFNet v4 takes any timestep; no recursion, so 4x is not 2x of 2x). The
// (pair, t) items of a clip run in batches of PostOptions::interpolate_batch, so a batch may
// mix gaps and times. The batch size changes the frames slightly (the convolutions sum in
// another order: 3e-6 in float, 2 of 60,480 bytes by one level at 4x between batches of 1 and
// 4, measured in tests/stages/post/test_rife_interpolator.cpp), so it is part of identity() and
// of the content key. The inputs are kept at their positions byte for byte.
//
// This header includes ATen (api/ never includes it; model_set.cpp does, privately).
// Ownership: the interpolator shares its per-device modules through ModuleCache.
// Thread-safety: run() and interpolate() may be called from any thread at once.
// Blocking: compute on the calling thread (a device's compute thread); not cancellable.
#pragma once

#include "stages/post/post_process.hpp"

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <string>

namespace vgen {

struct RifePackage {
  std::filesystem::path module;  // the TorchScript file
  int multiple = 64;             // what the module pads H and W to (informational: it pads itself)
};
// Reads DIR/manifest.json; Error(invalid_argument) naming the file and field when it is not a
// rife post package, Error(not_found) when it is missing.
RifePackage read_rife_package(const std::filesystem::path& dir);

class RifeInterpolator final : public PostProcessor {
 public:
  explicit RifeInterpolator(const PostOptions& options);  // reads the package (loads lazily, per device)
  PostKind kind() const override { return PostKind::interpolate; }
  std::string name() const override { return "rife"; }
  std::string identity() const override { return identity_; }  // rife@<module sha256>/batch=N
  bool uses_device() const override { return true; }
  VideoFrames run(const VideoFrames& in, int factor, const std::string& device) const override;

  // The whole interpolated sequence of `frames` [F, 3, H, W] float32 in [0, 1] by `factor`
  // (2 or 4): [(F - 1) x factor + 1, 3, H, W] on the CPU, not clamped, the inputs unchanged.
  at::Tensor interpolate(const at::Tensor& frames, int factor, const std::string& device) const;
  // The frames at `times` [N] between img0[i] and img1[i] ([N, 3, H, W], float32), on `device`.
  at::Tensor between(const at::Tensor& img0, const at::Tensor& img1, const at::Tensor& times, const std::string& device) const;
  int batch() const noexcept { return options_.interpolate_batch; }

 private:
  RifePackage package_;
  std::string identity_;
  PostOptions options_;
};

// Adds "rife" to post_processors(); idempotent, thread-safe.
void register_rife_interpolator();

}  // namespace vgen
