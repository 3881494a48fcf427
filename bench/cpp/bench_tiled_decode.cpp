// VAE decode tiled and untiled: time and peak memory of one decode of a random latent through
// an exported Wan decoder (bench/tiled_decode.py exports the Wan 2.1 VAE config with random
// weights and runs this once per setting, each in a fresh process, so VmHWM is that setting's).
//
//   bench_tiled_decode --decoder vae_decoder.pt --latent F,H,W [--tiling on|off]
//                      [--tile 256] [--stride 192] [--device cpu] [--warm 0|1]
//
// --tiling on: stages/exec/tiled_decode.hpp through decode_unclamped, as WanFamily::decode does;
// off: the decoder's forward on the whole latent. --warm 1 decodes a tiny latent first (the
// profiling executor's first calls) so the timed call is a steady one. One JSON object on
// stdout: {"seconds", "loaded_rss_bytes", "hwm_bytes", "output": [..], "tiles_per_frame"}.
#include "stages/exec/tiled_decode.hpp"
#include "stages/model/model_backend.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace json = boost::json;

namespace {

std::uint64_t status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(std::strlen(key)));
  return 0;
}

std::vector<std::int64_t> ints(const std::string& s) {
  std::vector<std::int64_t> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const auto comma = s.find(',', at);
    out.push_back(std::stoll(s.substr(at, comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string decoder, latent, device = "cpu";
  vgen::TiledDecodeOptions o;
  o.tiling = "off";
  bool warm = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--decoder") decoder = v;
    else if (k == "--latent") latent = v;
    else if (k == "--tiling") o.tiling = v;
    else if (k == "--tile") o.tile_height = o.tile_width = std::stoll(v);
    else if (k == "--stride") o.stride_height = o.stride_width = std::stoll(v);
    else if (k == "--device") device = v;
    else if (k == "--warm") warm = v != "0";
    else {
      std::cerr << "unknown flag " << k << "\n";
      return 2;
    }
  }
  const auto shape = ints(latent);
  if (decoder.empty() || shape.size() != 3) {
    std::cerr << "usage: bench_tiled_decode --decoder FILE --latent F,H,W [--tiling on|off] [--tile N] [--stride N]\n";
    return 2;
  }
  constexpr std::int64_t scale = 8;
  auto vae = vgen::load_module("torchscript", decoder, device, at::kFloat);
  const auto tile = [&](const at::Tensor& z) { return vae->call("decode_unclamped", {z}); };
  if (warm)
    for (int call = 0; call < 2; ++call) vae->forward({at::zeros({1, 16, 2, 4, 4})});
  const auto loaded_rss = status_kb("VmRSS:") * 1024;
  const auto z = at::randn({1, 16, shape[0], shape[1], shape[2]});
  const auto start = std::chrono::steady_clock::now();
  at::Tensor video = o.tiling == "on" ? vgen::tiled_decode(z, tile, scale, o) : vae->forward({z});
  video = video.to(at::kCPU);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto tiles = [](std::int64_t n, std::int64_t stride) { return (n + stride - 1) / stride; };
  json::object out{{"seconds", seconds}, {"loaded_rss_bytes", loaded_rss}, {"hwm_bytes", status_kb("VmHWM:") * 1024},
                   {"output", json::array(video.sizes().begin(), video.sizes().end())},
                   {"tiles_per_frame", o.tiling == "on" ? tiles(shape[1], o.stride_height / scale) * tiles(shape[2], o.stride_width / scale) : 1}};
  std::cout << json::serialize(out) << std::endl;
  return 0;
}
