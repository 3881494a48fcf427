#include "stages/post/rife_interpolator.hpp"

// LibTorch before doctest: c10's logging defines a CHECK macro of its own, which doctest's must replace.
#include <ATen/ATen.h>

#include "runtime/errors.hpp"
#include "stages/model/model_package.hpp"  // sha256_file
#include "tests/support/python_reference.hpp"
#include "tests/support/raw_tensor.hpp"

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

using namespace vgen;

using vgen::test::max_diff;
using vgen::test::read_bytes;
using vgen::test::read_f32;

TEST_CASE("RIFE: the interpolated clip matches ccvfi's IFNet in float and in 8-bit, for every batch size" * doctest::timeout(900)) {
  const auto dir = vgen::test::temp_dir("vgen-rife-");
  const auto ref = vgen::test::python_reference("rife_parity.py", dir.string());
  if (!ref) {
    MESSAGE("VGEN_PYTHON not set: the ccvfi reference cannot run; skipped");
    return;
  }
  const auto x = read_f32((*ref)["input"], (*ref)["input_shape"]);  // [3, 3, 40, 56]
  const int w = (*ref)["size"][0], h = (*ref)["size"][1];
  VideoFrames clip = VideoFrames::allocate(w, h, 3, 8.0);
  const auto u8 = read_bytes((*ref)["input_u8"]);
  REQUIRE(u8.size() == clip.rgb.size());
  std::memcpy(clip.rgb.data(), u8.data(), u8.size());
  std::map<int, std::pair<at::Tensor, std::vector<std::uint8_t>>> solo;  // batch 1's output by factor
  bool batch_changes_frames = false;
  for (const int batch : {1, 4}) {  // 1: a pair per call; 4: batches mixing gaps and times, a short last one
    PostOptions o;
    o.interpolate_model = std::string((*ref)["package"]);
    o.interpolate_batch = batch;
    const RifeInterpolator rife(o);
    CHECK(rife.uses_device());
    // The content key's part: the module and the batch size, which changes the frames (below).
    CHECK(rife.identity() == "rife@" + sha256_file(o.interpolate_model / "interpolator.pt") + "/batch=" + std::to_string(batch));
    for (const auto& c : (*ref)["cases"]) {
      const int factor = c["factor"];
      CAPTURE(batch);
      CAPTURE(factor);
      const auto want = read_f32(c["expected"], c["shape"]);
      const auto got = rife.interpolate(x, factor, "cpu:0");
      REQUIRE(got.sizes() == want.sizes());
      const double err = max_diff(got, want);
      CHECK(err <= 1e-4);  // float32 parity with the PyPI reference
      for (int64_t f = 0; f < x.size(0); ++f) CHECK(max_diff(got[f * factor], x[f]) == 0.0);  // the inputs kept
      // The post-stage entry point: bytes in, bytes out. Both sides round the same float frames
      // to 8 bits, so they differ only where a value lands within float error of .5: stated.
      const auto out = rife.run(clip, factor, "cpu:0");
      CHECK(out.count == 2 * factor + 1);
      CHECK(out.fps == 8.0 * factor);
      const auto expected = read_bytes(c["expected_u8"]);
      REQUIRE(expected.size() == out.rgb.size());
      int worst = 0;
      std::size_t off = 0;
      for (std::size_t i = 0; i < expected.size(); ++i) {
        const int d = std::abs(static_cast<int>(static_cast<std::uint8_t>(expected[i])) - static_cast<int>(out.rgb[i]));
        worst = std::max(worst, d);
        off += d != 0;
      }
      MESSAGE("batch " << batch << ", x" << factor << ": float max error " << err << "; 8-bit: max " << worst << " level(s), "
                       << off << " of " << expected.size() << " values differ");
      CHECK(worst <= 1);
      for (int f = 0; f < clip.count; ++f) CHECK(std::memcmp(out.frame(f * factor), clip.frame(f), clip.frame_bytes()) == 0);
      // Not bit-identical across batch sizes (the reason the batch is in the identity), though
      // within the parity tolerance: a regression that made it drift further fails here.
      if (batch == 1) {
        solo[factor] = {got, out.rgb};
      } else {
        const double batch_diff = max_diff(got, solo[factor].first);
        std::size_t bytes_differ = 0;
        for (std::size_t i = 0; i < out.rgb.size(); ++i) bytes_differ += out.rgb[i] != solo[factor].second[i];
        MESSAGE("x" << factor << ", batch 4 against batch 1: float max difference " << batch_diff << ", " << bytes_differ << " bytes differ");
        CHECK(batch_diff <= 1e-4);
        if (batch_diff > 0) batch_changes_frames = true;
      }
    }
  }
  MESSAGE("the batch size " << std::string(batch_changes_frames ? "changes" : "does not change") << " the interpolated frames here");
}

TEST_CASE("RIFE: factors other than 2 and 4, and folders that are not a rife post package, are refused naming why") {
  const auto dir = vgen::test::temp_dir("vgen-rife-bad-");
  PostOptions o;
  o.interpolate_model = dir;
  CHECK_THROWS_WITH_AS(RifeInterpolator{o}, doctest::Contains("manifest.json"), Error);
  std::ofstream(dir / "manifest.json") << R"({"kind": "post", "variant": "realesrgan", "architecture": "ifnet", "timesteps": "any", "module": "m.pt"})";
  CHECK_THROWS_WITH_AS(RifeInterpolator{o}, doctest::Contains("variant"), Error);
  std::ofstream(dir / "manifest.json") << R"({"kind": "post", "variant": "rife", "architecture": "ifnet", "timesteps": "0.5", "module": "m.pt"})";
  CHECK_THROWS_WITH_AS(RifeInterpolator{o}, doctest::Contains("timesteps"), Error);
  std::ofstream(dir / "manifest.json") << R"({"kind": "post", "variant": "rife", "architecture": "ifnet", "timesteps": "any", "module": "m.pt"})";
  CHECK_THROWS_WITH_AS(RifeInterpolator{o}, doctest::Contains("m.pt"), Error);  // the module file is missing
  std::ofstream(dir / "m.pt") << "not read until first use";
  o.interpolate_batch = 0;
  CHECK_THROWS_WITH_AS(RifeInterpolator{o}, doctest::Contains("interpolate_batch"), Error);
  o.interpolate_batch = 2;
  const RifeInterpolator rife(o);
  // The batch size is part of the content key: two batch sizes never share a cached result.
  PostOptions other = o;
  other.interpolate_batch = 3;
  CHECK(rife.identity() != RifeInterpolator(other).identity());
  CHECK(rife.identity().ends_with("/batch=2"));
  CHECK_THROWS_WITH_AS(rife.run(make_test_pattern(16, 16, 2, 8.0, 1), 3, "cpu:0"), doctest::Contains("interpolate: must be 2 or 4"), Error);
}
