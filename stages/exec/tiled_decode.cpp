#include "stages/exec/tiled_decode.hpp"

#include "runtime/errors.hpp"

#include <c10/core/InferenceMode.h>
#include <boost/json.hpp>

#include <algorithm>

namespace vgen {

namespace json = boost::json;

namespace {

// diffusers' blend_v (dim 3) / blend_h (dim 4), in place on b: its first `extent` rows become
// a's last rows * (1 - y / extent) + b's * (y / extent). A decoder that unpatchifies at its end
// is blended by diffusers before that, in patch rows: y and extent count patches, so the ramp
// steps once per `patch` pixel rows. The weights are computed in double and rounded to the
// tiles' dtype, as PyTorch does with diffusers' Python-float weights, so the blend rounds as
// diffusers' does.
void blend(const at::Tensor& a, const at::Tensor& b, std::int64_t dim, std::int64_t extent, std::int64_t patch) {
  extent = std::min({a.size(dim), b.size(dim), extent});
  const auto patches = extent / patch;
  if (patches <= 0) return;
  const auto y = at::floor_divide(at::arange(extent, at::TensorOptions().dtype(at::kDouble)), patch) /
                 static_cast<double>(patches);
  const auto shape = dim == 3 ? std::vector<std::int64_t>{extent, 1} : std::vector<std::int64_t>{extent};
  const auto w_b = y.to(b.options()).view(shape);
  const auto w_a = (1.0 - y).to(b.options()).view(shape);
  auto head = b.narrow(dim, 0, extent);
  head.copy_(a.narrow(dim, a.size(dim) - extent, extent) * w_a + head * w_b);
}

std::int64_t positive_int(const json::value& v, const std::string& field) {
  if (!v.is_int64() || v.get_int64() <= 0) throw_error(ErrorKind::invalid_argument, field + ": must be a positive integer");
  return v.get_int64();
}

// n, or [height, width].
std::pair<std::int64_t, std::int64_t> size_pair(const json::value& v, const std::string& field) {
  if (v.is_array()) {
    const auto& a = v.get_array();
    if (a.size() != 2) throw_error(ErrorKind::invalid_argument, field + ": must be n or [height, width]");
    return {positive_int(a[0], field), positive_int(a[1], field)};
  }
  const auto n = positive_int(v, field);
  return {n, n};
}

}  // namespace

void check_tiled_decode_options(const TiledDecodeOptions& o, std::int64_t scale) {
  if (o.tiling != "auto" && o.tiling != "on" && o.tiling != "off")
    throw_error(ErrorKind::invalid_argument, "decode.tiling: must be auto, on or off (not '" + o.tiling + "')");
  auto check = [scale](std::int64_t tile, std::int64_t stride, const char* axis) {
    const std::string which = std::string("decode.tile/stride (") + axis + ")";
    if (tile <= 0 || stride <= 0 || tile % scale != 0 || stride % scale != 0)
      throw_error(ErrorKind::invalid_argument, which + ": must be positive multiples of the VAE's scale " + std::to_string(scale));
    if (stride > tile) throw_error(ErrorKind::invalid_argument, which + ": the stride must not exceed the tile");
  };
  check(o.tile_height, o.stride_height, "height");
  check(o.tile_width, o.stride_width, "width");
}

bool wants_tiled_decode(const TiledDecodeOptions& o, std::int64_t h, std::int64_t w, std::int64_t scale) {
  if (o.tiling == "off") return false;
  if (o.tiling == "auto" && h * w <= o.auto_min_latent_area) return false;
  return h > o.tile_height / scale || w > o.tile_width / scale;  // diffusers' _decode condition
}

at::Tensor tiled_decode(const at::Tensor& latents, const LatentDecoder& decode, std::int64_t scale,
                        const TiledDecodeOptions& o, std::int64_t patch) {
  check_tiled_decode_options(o, scale);
  if (patch < 1 || scale % patch != 0)
    throw_error(ErrorKind::invalid_argument, "tiled decode: patch " + std::to_string(patch) + " does not divide the scale");
  // Modules return inference tensors (stages/model/model_backend.cpp), which only inference
  // mode may write into; the blend writes into the tiles.
  c10::InferenceMode guard;
  const auto h = latents.size(3), w = latents.size(4);
  const auto out_h = h * scale, out_w = w * scale;
  const auto tile_h = o.tile_height / scale, tile_w = o.tile_width / scale;
  const auto step_h = o.stride_height / scale, step_w = o.stride_width / scale;
  const auto blend_h = o.tile_height - o.stride_height, blend_w = o.tile_width - o.stride_width;
  // diffusers decodes every tile first, then blends each with the tile above and the one to its
  // left as those are after their own blends. The same order, a row at a time: only the row
  // above and the current row are kept, and each tile's crop goes straight into the output.
  std::vector<at::Tensor> above, row;
  at::Tensor out;
  for (std::int64_t i = 0; i < h; i += step_h) {
    row.clear();
    for (std::int64_t j = 0; j < w; j += step_w) {
      auto tile = decode(latents.slice(3, i, std::min(i + tile_h, h)).slice(4, j, std::min(j + tile_w, w)).contiguous());
      if (i > 0) blend(above[row.size()], tile, 3, blend_h, patch);
      if (!row.empty()) blend(row.back(), tile, 4, blend_w, patch);
      if (!out.defined()) out = at::empty({tile.size(0), tile.size(1), tile.size(2), out_h, out_w}, tile.options());
      const auto y = i * scale, x = j * scale;
      const auto rows = std::min(o.stride_height, out_h - y), cols = std::min(o.stride_width, out_w - x);
      out.narrow(3, y, rows).narrow(4, x, cols).copy_(tile.narrow(3, 0, rows).narrow(4, 0, cols));
      row.push_back(std::move(tile));
    }
    std::swap(above, row);
  }
  return out;
}

TiledDecodeOptions read_tiled_decode_options(const json::object& s, TiledDecodeOptions o, const std::string& where,
                                             std::int64_t scale) {
  const std::string at = where + ": decode.";
  for (const auto& [key, value] : s) {
    if (key == "tiling") {
      if (!value.is_string()) throw_error(ErrorKind::invalid_argument, at + "tiling: must be auto, on or off");
      o.tiling = std::string(value.get_string());
    } else if (key == "tile") {
      std::tie(o.tile_height, o.tile_width) = size_pair(value, at + "tile");
    } else if (key == "stride") {
      std::tie(o.stride_height, o.stride_width) = size_pair(value, at + "stride");
    } else if (key == "auto_min_latent_area") {
      o.auto_min_latent_area = positive_int(value, at + "auto_min_latent_area");
    } else {
      throw_error(ErrorKind::invalid_argument, at + std::string(key) + ": unknown field");
    }
  }
  try {
    check_tiled_decode_options(o, scale);
  } catch (const Error& e) {
    throw_error(ErrorKind::invalid_argument, where + ": " + e.what());
  }
  return o;
}

}  // namespace vgen
