#include "stages/exec/tiled_decode.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <boost/json/parse.hpp>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runtime/errors.hpp"
#include "stages/model/model_backend.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kScale = 8;

// A decoder without spatial context: each latent pixel becomes a scale x scale block of its
// channel sums (and two more frames per latent frame after the first, as Wan's does). Tiling
// cannot change its output, since overlapping tiles agree wherever they overlap.
at::Tensor pointwise_decoder(const at::Tensor& z) {
  auto x = z.sum(1, true).repeat({1, 3, 1, 1, 1});
  x = x.repeat_interleave(kScale, 3).repeat_interleave(kScale, 4);
  return at::cat({x.narrow(2, 0, 1), x.narrow(2, 1, x.size(2) - 1).repeat_interleave(2, 2)}, 2);
}

TiledDecodeOptions small_tiles() {
  TiledDecodeOptions o;
  o.tiling = "on";
  o.tile_height = 32, o.tile_width = 48, o.stride_height = 24, o.stride_width = 32;
  return o;
}

}  // namespace

TEST_CASE("tiled_decode: a decoder without spatial context decodes the same tiled, one call per tile") {
  const auto z = at::randn({2, 4, 3, 9, 11}, at::TensorOptions().dtype(at::kFloat));
  std::vector<std::vector<std::int64_t>> shapes;
  const auto tiled = tiled_decode(z, [&](const at::Tensor& t) {
    shapes.push_back(t.sizes().vec());
    return pointwise_decoder(t);
  }, kScale, small_tiles());
  const auto whole = pointwise_decoder(z);
  REQUIRE(tiled.sizes() == whole.sizes());
  CHECK(at::allclose(tiled, whole, 1e-6, 1e-5));
  // Latent rows 0, 3, 6 (tiles of 4) x columns 0, 4, 8 (tiles of 6), cut at the edges.
  REQUIRE(shapes.size() == 9);
  CHECK(shapes[0] == std::vector<std::int64_t>{2, 4, 3, 4, 6});
  CHECK(shapes[2] == std::vector<std::int64_t>{2, 4, 3, 4, 3});
  CHECK(shapes[8] == std::vector<std::int64_t>{2, 4, 3, 3, 3});
}

TEST_CASE("tiled_decode: overlaps blend with a linear ramp from the earlier tile to the later one") {
  // Each tile decodes to its call number: the columns where tiles 0 and 1 overlap (x from 32 to
  // 48) go from 0 towards 1 in steps of 1/16; the first row of tiles is not blended vertically.
  int call = 0;
  const auto z = at::zeros({1, 1, 1, 2, 8});
  auto o = small_tiles();
  o.tile_height = o.stride_height = 16;
  const auto out = tiled_decode(z, [&](const at::Tensor& t) {
    return at::full({1, 1, 1, t.size(3) * kScale, t.size(4) * kScale}, static_cast<float>(call++));
  }, kScale, o);
  REQUIRE(call == 2);
  for (int x = 0; x < 16; ++x) CHECK(out[0][0][0][0][32 + x].item<float>() == doctest::Approx(x / 16.0));
  CHECK(out[0][0][0][15][63].item<float>() == 1.0f);
}

TEST_CASE("tiled_decode: a decoder that unpatchifies 2 x 2 at its end is blended in patches, as diffusers does") {
  int call = 0;
  const auto z = at::zeros({1, 1, 1, 2, 8});
  auto o = small_tiles();
  o.tile_height = o.stride_height = 16;
  const auto out = tiled_decode(z, [&](const at::Tensor& t) {
    return at::full({1, 1, 1, t.size(3) * kScale, t.size(4) * kScale}, static_cast<float>(call++));
  }, kScale, o, 2);
  for (int x = 0; x < 16; ++x) CHECK(out[0][0][0][0][32 + x].item<float>() == doctest::Approx((x / 2) / 8.0));
  CHECK_THROWS_AS(tiled_decode(z, pointwise_decoder, kScale, o, 3), Error);
}

TEST_CASE("wants_tiled_decode: off never, auto only above its area, and only when larger than one tile") {
  TiledDecodeOptions o;  // auto above 60 x 104, tiles of 256 = 32 latent pixels
  CHECK_FALSE(wants_tiled_decode(o, 4, 6, kScale));      // the tests' 32 x 48 clips
  CHECK_FALSE(wants_tiled_decode(o, 60, 104, kScale));   // 480p decodes whole
  CHECK(wants_tiled_decode(o, 90, 160, kScale));         // 720p tiles
  o.tiling = "on";
  CHECK_FALSE(wants_tiled_decode(o, 32, 32, kScale));    // one tile
  CHECK(wants_tiled_decode(o, 33, 8, kScale));
  o.tiling = "off";
  CHECK_FALSE(wants_tiled_decode(o, 90, 160, kScale));
}

TEST_CASE("read_tiled_decode_options: a manifest section overrides, wrong values are named") {
  auto read = [](const char* text) {
    return read_tiled_decode_options(boost::json::parse(text).as_object(), {}, "pkg", kScale);
  };
  const auto o = read(R"({"tiling": "on", "tile": [64, 96], "stride": 48})");
  CHECK(o.tiling == "on");
  CHECK(o.tile_height == 64);
  CHECK(o.tile_width == 96);
  CHECK(o.stride_height == 48);
  CHECK(o.stride_width == 48);
  CHECK(read("{}").tiling == "auto");
  auto refused = [&](const char* text, const std::string& field) {
    try {
      read(text);
      FAIL("accepted " << text);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK_MESSAGE(std::string(e.what()).find(field) != std::string::npos, e.what());
    }
  };
  refused(R"({"tiling": "maybe"})", "tiling");
  refused(R"({"tile": 60})", "multiples");      // not a multiple of 8
  refused(R"({"stride": 512})", "exceed");      // stride above the tile
  refused(R"({"tile": [64]})", "decode.tile");
  refused(R"({"tiles": 64})", "decode.tiles");
}

// Parity with diffusers 0.42.1: AutoencoderKLWan.enable_tiling(32, 48, 24, 32) on the tiny
// random Wan VAE against vgen's exported decoder driven tile by tile (the fixture
// stages.wan_tiled_vae_parity_reference, tools/reference/wan_tiled_vae_parity.py).
TEST_CASE("tiled_decode: the exported tiny Wan VAE matches diffusers' tiled decode (float32)") {
  const char* dir = std::getenv("VGEN_WAN_TILED_VAE_PARITY_DIR");
  if (!dir || !*dir || !fs::is_regular_file(fs::path(dir) / "parity.json")) {
    WARN_MESSAGE(false, "VGEN_WAN_TILED_VAE_PARITY_DIR not set (no tooling Python): skipped");
    return;
  }
  std::ifstream in(fs::path(dir) / "parity.json");
  const auto info = nlohmann::json::parse(in);
  auto ref = torch::jit::load(info["reference"].get<std::string>());
  auto get = [&](const char* name) { return ref.attr(name).toTensor(); };
  const auto& t = info["tiling"];
  TiledDecodeOptions o;
  o.tiling = "on";
  o.tile_height = t["tile_sample_min_height"], o.tile_width = t["tile_sample_min_width"];
  o.stride_height = t["tile_sample_stride_height"], o.stride_width = t["tile_sample_stride_width"];
  const std::int64_t scale = info["spatial_scale"];
  auto vae = load_module("torchscript", info["decoder"].get<std::string>(), "cpu", at::kFloat);
  const auto z = get("latents");
  REQUIRE(wants_tiled_decode(o, z.size(3), z.size(4), scale));

  auto unclamped = [&](const at::Tensor& tile) { return vae->call("decode_unclamped", {tile}); };
  const auto tiled = tiled_decode(z, unclamped, scale, o).clamp(-1, 1);
  const auto expected = get("frames_tiled");
  REQUIRE(tiled.sizes() == expected.sizes());
  const double diff = (tiled - expected).abs().max().item<double>();
  const double untiled = (vae->forward({z}) - get("frames_untiled")).abs().max().item<double>();
  const double blend_effect = (tiled - vae->forward({z})).abs().max().item<double>();
  MESSAGE("vgen tiled vs diffusers tiled: max |diff| " << diff << "; vgen untiled vs diffusers untiled: " << untiled
                                                       << "; tiled vs untiled (the blend's effect): " << blend_effect);
  CHECK(diff <= 1e-4);
  CHECK(untiled <= 1e-4);
  CHECK(blend_effect > 1e-2);  // tiling is not a no-op at these sizes: the comparison can fail

  // Clamping each tile before the blend (the decoder's forward) is not diffusers' tiled decode
  // where decoded values leave [-1, 1] (the reference scales its latents so that some do).
  auto clamped = [&](const at::Tensor& tile) { return vae->forward({tile}); };
  const double per_tile_clamp = (tiled_decode(z, clamped, scale, o) - expected).abs().max().item<double>();
  MESSAGE("clamped per tile vs diffusers tiled: max |diff| " << per_tile_clamp);
  CHECK(per_tile_clamp > 1e-4);
}
