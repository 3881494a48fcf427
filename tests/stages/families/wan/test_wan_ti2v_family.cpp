#include "stages/families/wan/wan_ti2v_family.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <unistd.h>

#include "runtime/errors.hpp"
#include "tests/support/family_group.hpp"
#include "tests/support/parity_reference.hpp"
#include "stages/job_spec.hpp"
#include "stages/families/wan/wan_i2v_family.hpp"  // wan_job_image

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

// The tiny Wan 2.2 TI2V package and diffusers' WanPipeline / WanImageToVideoPipeline on one
// case, from the CTest fixture `stages.wan_ti2v_parity_reference` (tools/reference/wan_ti2v_parity.py).
using Reference = test::ParityReference;

Reference* reference_or_skip() {
  register_builtin_families();  // as ModelSet does
  return test::parity_reference_or_skip("VGEN_WAN_TI2V_PARITY_DIR");
}

// The reference case as a job spec; with `image`, the reference's PNG (already at the video size).
boost::json::object case_json(const Reference& ref, std::uint64_t seed, double guidance, bool image) {
  auto o = test::parity_case_spec(ref.info["case"], guidance, seed);
  if (image) o["image"] = ref.info["image"].get<std::string>();
  return o;
}

std::shared_ptr<WanJob> make_job(Family& family, const boost::json::object& spec, const at::Tensor& image = {}) {
  auto job = test::validated_job<WanJob>(family, spec);
  job->image = image;
  return job;
}

using test::max_diff;
using test::run_group;

void check_parity(Reference& ref, const std::string& name, double guidance, bool image) {
  auto family = load_family(ref.info["package"].get<std::string>());
  auto job = make_job(*family, case_json(ref, ref.info["seed"].get<std::uint64_t>(), guidance, image));
  auto steps = run_group(*family, {job})[0];
  CHECK(job->condition.defined() == image);
  if (image) {
    const double cond = max_diff(job->condition, ref.get("condition"));
    MESSAGE(name << ": max |vgen - diffusers| image latents = " << cond);
    CHECK(cond <= 1e-5);
  }
  const int n = ref.info["steps"].get<int>();
  REQUIRE(static_cast<int>(steps.size()) == n);
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    const double d = max_diff(steps[i], ref.get(test::step_key(name, i)));
    MESSAGE(name << ": step " << i << " latents max |vgen - diffusers| = " << d);
    worst = std::max(worst, d);
  }
  const double frames = test::frames_diff(ref, name, job->frames);
  MESSAGE(name << ": max |vgen - diffusers| latents (every step) = " << worst << ", frames = " << frames);
  CHECK(worst <= 1e-3);
  CHECK(frames <= 1e-3);
}

}  // namespace

TEST_CASE("per-token timesteps: t on every token, 0 on the first latent frame of an image-to-video row") {
  const auto t = at::tensor({900.0f, 500.0f});
  // 2 rows, 3 latent frames of 4x6 latents, patch 2x2: 2x3 = 6 tokens a frame.
  const auto ts = wan_token_timesteps(t, {2, 48, 3, 4, 6}, 2, 2, {false, true});
  REQUIRE(ts.sizes() == at::IntArrayRef{2, 18});
  CHECK(ts.dtype() == at::kFloat);
  CHECK(ts[0].eq(900).all().item<bool>());
  CHECK(ts[1].narrow(0, 0, 6).eq(0).all().item<bool>());
  CHECK(ts[1].narrow(0, 6, 12).eq(500).all().item<bool>());
  CHECK_THROWS_AS(wan_token_timesteps(t, {3, 48, 3, 4, 6}, 2, 2, {false, true, true}), Error);
}

TEST_CASE("a wan2.2-ti2v package loads as the TI2V family; its image is optional" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  CHECK(dynamic_cast<WanTI2VFamily*>(family.get()) != nullptr);
  CHECK(family->package().family == "wan2.2-ti2v");
  CHECK(family->package().latent_channels == 48);
  CHECK(family->package().spatial_scale == 16);
  CHECK_NOTHROW(family->validate(case_json(*ref, 1, 5.0, false)));
  CHECK(family->validate(case_json(*ref, 1, 5.0, true)).image == ref->info["image"].get<std::string>());
}

TEST_CASE("vgen's TI2V family reproduces diffusers' text-to-video and image-to-video, every step and the frames" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const double g = ref->info["case"]["guidance_scale"].get<double>();
  SUBCASE("text-to-video") { check_parity(*ref, "t2v", g, false); }
  SUBCASE("image-to-video") { check_parity(*ref, "i2v", g, true); }
  SUBCASE("image-to-video without guidance") { check_parity(*ref, "nocfg", 1.0, true); }
}

TEST_CASE("TI2V text- and image-to-video jobs batched in one group are each within 1e-4 of their solo run" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto other = case_json(*ref, 77, 5.0, true);
  other["prompt"] = "a blue square spinning on a white background";
  const auto image = wan_job_image(*make_job(*family, case_json(*ref, 1, 5.0, true)));
  std::vector<std::pair<boost::json::object, at::Tensor>> specs;
  specs.emplace_back(case_json(*ref, 5, 5.0, false), at::Tensor());  // text-to-video
  specs.emplace_back(case_json(*ref, 5, 5.0, true), at::Tensor());   // the same seed and prompt with the image
  specs.emplace_back(other, image.flip({2}).contiguous());            // another image and prompt
  std::vector<std::shared_ptr<WanJob>> together;
  for (const auto& [s, img] : specs) together.push_back(make_job(*family, s, img));
  test::check_batched_matches_solo(*family, together, [&](std::size_t j) { return make_job(*family, specs[j].first, specs[j].second); });
  // The rows differ: the image changes the video (same seed and prompt), and so does the other job.
  CHECK(max_diff(together[0]->frames, together[1]->frames) > 1e-2);
  CHECK(max_diff(together[1]->frames, together[2]->frames) > 1e-2);
  // Image-to-video keeps the image's latents as the first latent frame.
  CHECK(max_diff(together[1]->state.latents.narrow(2, 0, 1), together[1]->condition) == 0);
}

TEST_CASE("TI2V image errors name the image; the warm-up calls every module" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto gone = make_job(*family, case_json(*ref, 1, 5.0, true));
  gone->spec.image = "/nonexistent/vgen-test.png";
  CHECK_THROWS_WITH_AS(family->prepare("cpu", {gone.get()}), doctest::Contains("image"), Error);
  auto wrong = make_job(*family, case_json(*ref, 1, 5.0, false), at::zeros({3, 16, 16}));
  CHECK_THROWS_WITH_AS(family->prepare("cpu", {wrong.get()}), doctest::Contains("image"), Error);
  CHECK_NOTHROW(family->warm_up("cpu"));
}

TEST_CASE("a TI2V package whose transformer takes one timestep per row is refused, naming the field" *
          doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const fs::path src = ref->info["package"].get<std::string>();
  const auto dir = fs::temp_directory_path() / ("vgen_ti2v_pkg_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(src, dir, fs::copy_options::recursive);
  nlohmann::json manifest;
  {
    std::ifstream in(dir / "manifest.json");
    manifest = nlohmann::json::parse(in);
  }
  manifest["transformer"].erase("timestep");
  std::ofstream(dir / "manifest.json") << manifest.dump();
  CHECK_THROWS_WITH_AS(load_family(dir), doctest::Contains("transformer.timestep"), Error);
  fs::remove_all(dir);
}

// Issue 20: a job joining a running group mid-denoise (the real Batcher and step loop) ends as
// it would alone, and so does the job it joined: image-to-video joining text-to-video, and the
// other way round (per-token timesteps with rows at different steps).
TEST_CASE("TI2V: an I2V job joining a running T2V group, and a T2V job joining an I2V group, each within 1e-4 of solo" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto other = case_json(*ref, 77, 5.0, true);
  other["prompt"] = "a blue square spinning on a white background";
  const auto flipped = wan_job_image(*make_job(*family, case_json(*ref, 1, 5.0, true))).flip({2}).contiguous();
  auto t2v = [&] { return make_job(*family, case_json(*ref, 5, 5.0, false)); };
  auto i2v = [&] { return make_job(*family, other, flipped); };
  test::check_joined_equals_solo(family, [&](int i) { return i == 0 ? t2v() : i2v(); }, 1, "wan2.2-ti2v, I2V joins T2V");
  test::check_joined_equals_solo(family, [&](int i) { return i == 0 ? i2v() : t2v(); }, 2, "wan2.2-ti2v, T2V joins I2V");
}
