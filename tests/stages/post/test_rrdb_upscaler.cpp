#include "stages/post/rrdb_upscaler.hpp"

// LibTorch before doctest: c10's logging defines a CHECK macro of its own, which doctest's must replace.
#include <ATen/ATen.h>

#include "runtime/errors.hpp"
#include "stages/model/model_package.hpp"  // sha256_file
#include "tests/support/python_reference.hpp"
#include "tests/support/raw_tensor.hpp"

#include <fstream>
#include <iterator>

using namespace vgen;

using vgen::test::max_diff;
using vgen::test::read_bytes;
using vgen::test::read_f32;

TEST_CASE("the exported RRDBNet matches spandrel; tiles with full context match exactly, short overlaps show seams"
          * doctest::timeout(600)) {
  const auto dir = vgen::test::temp_dir("vgen-rrdb-");
  const auto ref = vgen::test::python_reference("realesrgan_parity.py", dir.string());
  if (!ref) {
    MESSAGE("VGEN_PYTHON not set: the spandrel reference cannot run; skipped");
    return;
  }
  const auto x = read_f32((*ref)["input"], (*ref)["input_shape"]);  // [1, 3, 48, 64]
  for (const auto& c : (*ref)["cases"]) {
    const int scale = c["scale"];
    CAPTURE(scale);
    PostOptions o;
    o.upscale_model = std::string(c["package"]);
    const RrdbUpscaler up(o);
    CHECK(up.scale() == scale);
    // The content key's part: the weights' hash and the tiling (tiles move seam pixels).
    CHECK(up.identity() == "realesrgan@" + sha256_file(o.upscale_model / "upscaler.pt") + "/tile=256+16");
    auto retiled = o;
    retiled.tile = 128;
    CHECK(RrdbUpscaler(retiled).identity() != up.identity());
    CHECK(up.uses_device());
    const auto want = read_f32(c["expected"], c["shape"]);
    const auto whole = up.upscale(x, scale, "cpu:0", 0, 0);
    CHECK(max_diff(whole, want) <= 1e-4);  // float32 parity with the PyPI reference
    // The tiny net's receptive field is ~34 input pixels at scale 4 and ~66 at scale 2 (its
    // input is unshuffled to half size): with 80 of context a tile sees everything the whole
    // frame would, and only the tile assembly is tested.
    const auto full_context = up.upscale(x, scale, "cpu:0", 16, 80);
    CHECK(max_diff(full_context, whole) <= 1e-4);
    // A shorter overlap cuts context off: the seam error, stated (not zero, bounded).
    const double seam = max_diff(up.upscale(x, scale, "cpu:0", 16, 8), whole);
    const double mean_seam = (up.upscale(x, scale, "cpu:0", 16, 8) - whole).abs().mean().item<double>();
    MESSAGE("scale " << scale << ": untiled vs spandrel " << max_diff(whole, want) << "; tiles of 16 with overlap 8 vs untiled: max "
                     << seam << ", mean " << mean_seam << " (output range " << whole.min().item<double>() << ".."
                     << whole.max().item<double>() << ")");
    CHECK(seam > 0.0);
  }
}

TEST_CASE("a job's factor other than the model's scale: one pass and an area shrink, or two passes" * doctest::timeout(600)) {
  const auto dir = vgen::test::temp_dir("vgen-rrdb-");
  const auto ref = vgen::test::python_reference("realesrgan_parity.py", dir.string());
  if (!ref) return;
  const auto x = read_f32((*ref)["input"], (*ref)["input_shape"]);
  for (const auto& c : (*ref)["cases"]) {
    PostOptions o;
    o.upscale_model = std::string(c["package"]);
    const RrdbUpscaler up(o);
    const auto whole = up.upscale(x, up.scale(), "cpu:0", 0, 0);
    if (up.scale() == 4) {
      const auto half = up.upscale(x, 2, "cpu:0", 0, 0);
      CHECK(half.sizes() == at::IntArrayRef({1, 3, 96, 128}));
      CHECK(max_diff(half, at::avg_pool2d(whole, 2)) <= 1e-6);
    } else {
      const auto twice = up.upscale(x, 4, "cpu:0", 0, 0);
      CHECK(twice.sizes() == at::IntArrayRef({1, 3, 192, 256}));
      CHECK(max_diff(twice, up.upscale(whole, 2, "cpu:0", 0, 0)) <= 1e-6);
    }
    // The post-stage entry point: bytes in, bytes out, the contract kept.
    const auto clip = make_test_pattern(32, 16, 2, 8.0, 1);
    const auto out = up.run(clip, 2, "cpu:0");
    CHECK(out.width == 64);
    CHECK(out.height == 32);
    CHECK(out.count == 2);
  }
}

TEST_CASE("a folder that is not a realesrgan post package is refused naming the file") {
  const auto dir = vgen::test::temp_dir("vgen-rrdb-bad-");
  PostOptions o;
  o.upscale_model = dir;
  CHECK_THROWS_WITH_AS(RrdbUpscaler{o}, doctest::Contains("manifest.json"), Error);
  std::ofstream(dir / "manifest.json") << R"({"kind": "post", "variant": "rife", "architecture": "rrdbnet", "scale": 4, "module": "m.pt"})";
  CHECK_THROWS_WITH_AS(RrdbUpscaler{o}, doctest::Contains("variant"), Error);
}
