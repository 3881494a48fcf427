// TiledDecodeOptions: when and how a family's VAE decodes a latent in overlapping spatial tiles
// (stages/exec/tiled_decode.hpp). A plain struct without LibTorch, so that FamilyOptions
// (stages/families/family_options.hpp) and a config reader can hold it as it is; a package's
// manifest may override it (read_tiled_decode_options).
#pragma once

#include <cstdint>
#include <string>

namespace vgen {

struct TiledDecodeOptions {
  // "auto": tiled when the latent's area (height x width, latent pixels) exceeds
  // auto_min_latent_area; "on": always (when the latent is larger than one tile); "off": never.
  std::string tiling = "auto";
  // Tile and stride in output pixels, as diffusers' enable_tiling(tile_sample_min_*,
  // tile_sample_stride_*) takes them (its defaults); tile - stride pixels overlap and are blended.
  // Multiples of the family's spatial scale, 0 < stride <= tile.
  std::int64_t tile_height = 256, tile_width = 256;
  std::int64_t stride_height = 192, stride_width = 192;
  // 60 x 104 is Wan's 832x480 latent: 480p decodes whole, larger sizes (720p: 90 x 160) tiled.
  // Today's test sizes (a few latent pixels) are far below it.
  std::int64_t auto_min_latent_area = 60 * 104;
};

}  // namespace vgen
