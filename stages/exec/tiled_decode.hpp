// Spatially tiled VAE decode: a latent [B, C, F, h, w] decoded as overlapping tiles of
// tile_height x tile_width output pixels every stride pixels, each tile through the family's
// decoder, the overlaps blended with linear ramps (above, then left) and the tiles cropped to
// their stride, exactly as diffusers' AutoencoderKLWan.tiled_decode (0.42.1) does, so that the
// result matches diffusers' tiled decode. Peak memory: one decoder call on one tile plus two
// rows of decoded tiles and the output, instead of one call on the whole frame.
// Generic over the decoder (a function latents -> frames at spatial_scale times the size); the
// decoder must not clamp (blending clamped tiles differs from diffusers): the caller clamps.
// Thread-safety: tiled_decode holds no state; it calls `decode` on the calling thread, one tile
// at a time, and blocks until done. No cancellation: one tile's decode cannot be interrupted.
#pragma once

#include "stages/exec/tiled_decode_options.hpp"

#include <ATen/ATen.h>
#include <boost/json/fwd.hpp>

#include <functional>

namespace vgen {

// latents [B, C, F, h, w] (one tile) -> frames [B, channels, F', h * scale, w * scale].
using LatentDecoder = std::function<at::Tensor(const at::Tensor& latents)>;

// Error(invalid_argument) naming the field when tiling is not auto|on|off, or tile and stride
// are not positive multiples of spatial_scale with stride <= tile.
void check_tiled_decode_options(const TiledDecodeOptions& options, std::int64_t spatial_scale);

// Whether a latent of latent_height x latent_width is decoded tiled under `options`: never with
// "off"; with "on" and "auto" (above its area) only when it is larger than one tile, as
// diffusers tiles only then.
bool wants_tiled_decode(const TiledDecodeOptions& options, std::int64_t latent_height, std::int64_t latent_width,
                        std::int64_t spatial_scale);

// The frames of `latents` [B, C, F, h, w] decoded tile by tile: [B, channels, F', h * scale,
// w * scale] on the decoder's output device and dtype. Does not check wants_tiled_decode:
// a latent within one tile is decoded in one call. `patch`: the decoder unpatchifies patch x
// patch pixels at its end (Wan 2.2's VAE: 2); diffusers blends before unpatchifying, so the
// blend ramps step once per patch (1: per pixel).
at::Tensor tiled_decode(const at::Tensor& latents, const LatentDecoder& decode, std::int64_t spatial_scale,
                        const TiledDecodeOptions& options, std::int64_t patch = 1);

// `base` with the fields a JSON section gives: {"tiling": "auto"|"on"|"off", "tile": [h, w] or n,
// "stride": [h, w] or n, "auto_min_latent_area": n} (a package manifest's "decode" section).
// Error(invalid_argument) naming `where` and the field for a wrong type or value.
TiledDecodeOptions read_tiled_decode_options(const boost::json::object& section, TiledDecodeOptions base,
                                             const std::string& where, std::int64_t spatial_scale);

}  // namespace vgen
