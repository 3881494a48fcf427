// Time-chunked VAE decode: a clip's latent frames decoded one at a time through a causal VAE
// that carries its convolution caches from frame to frame (Wan's: diffusers' AutoencoderKLWan
// decodes the same way, one latent frame per call with its _feat_map), so the frames of each
// chunk can go on (to an encoder, a live stream) while the rest of the clip is decoded. The
// chunks put together are the whole-clip decode's frames exactly: the exporter's streaming
// methods run the same traced chunks as its forward (tools/vgen_export/wan_vae.py checks
// torch.equal at export; tests/stages/exec/test_chunked_decode.cpp here).
//
// The module interface passes tensors only, so the exporter packs each chunk's output into one
// float32 vector [5, B, C, T, H, W, video..., state...]: `decode_first_packed(z0)` for latent
// frame 0, then `decode_step_packed(z_i, state)` with the state of the call before. The state
// (the caches and their shapes) is opaque here. Packages exported before these methods lack
// them: has_chunked_decode says so, and their families keep the whole-clip decode.
//
// Thread-safety: a ChunkedDecoder is one clip's decode: one thread at a time. The module is
// shared (Module calls are re-entrant). Blocking: each next() is one module call. No
// cancellation: a chunk's call cannot be interrupted; a caller may stop between chunks.
#pragma once

#include <ATen/core/Tensor.h>
#include <boost/json/fwd.hpp>

#include <functional>
#include <string>
#include <vector>

namespace vgen {

class Module;  // stages/model/model_backend.hpp

inline constexpr const char* kDecodeFirstPacked = "decode_first_packed";
inline constexpr const char* kDecodeStepPacked = "decode_step_packed";

// Whether a component's methods (its manifest's "methods") include the packed streaming pair.
bool has_chunked_decode(const std::vector<std::string>& methods);

class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(const Module& vae) : vae_(vae) {}
  // The next latent frame [B, C, 1, h, w] (frame 0 first, then in order) -> its video frames
  // [B, 3, T, H, W] (T: 1 for frame 0, the temporal scale after), clamped to [-1, 1], float32
  // on the module's device. Error(invalid_argument) when the module has no packed methods,
  // Error(internal) for a packed output that does not hold what it says.
  at::Tensor next(const at::Tensor& latent_frame);
  int chunks() const noexcept { return chunks_; }

 private:
  const Module& vae_;
  at::Tensor state_;
  int chunks_ = 0;
};

// Whether a package manifest lists `component`'s packed streaming methods (its "components"
// entry's "methods") and no compiled file for it (a compiled whole-clip decode differs from the
// chunks by a byte here and there): families check their VAE with it, the decode stage whether to stream.
bool package_has_chunked_decode(const boost::json::object& manifest, const std::string& component);

// The clip z [B, C, F, h, w] decoded a latent frame at a time; `emit` (may be empty) gets each
// chunk [B, 3, T, H, W] as it is decoded, on the calling thread. Returns the chunks joined:
// [B, 3, 1 + T (F - 1), H, W], equal to the module's forward(z).
at::Tensor chunked_decode(const Module& vae, const at::Tensor& z, const std::function<void(const at::Tensor&)>& emit = {});

}  // namespace vgen
