// Wan VACE (stages/families/wan/wan_vace.hpp) against diffusers' WanVACEPipeline, from the
// CTest fixture `stages.wan_vace_parity_reference` (tools/reference/wan_vace_parity.py): a
// control video, a mask video and reference images, with and without guidance; batched and
// joined jobs against their solo runs; refusals naming the field.
#include "stages/families/wan/wan_vace.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <string>

#include "runtime/errors.hpp"
#include "stages/job_spec.hpp"
#include "stages/schedulers/scheduler.hpp"
#include "tests/support/family_group.hpp"
#include "tests/support/parity_reference.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;

namespace {

using Reference = test::ParityReference;
using test::max_diff;

Reference* reference_or_skip() {
  register_builtin_families();  // as ModelSet does
  return test::parity_reference_or_skip("VGEN_WAN_VACE_PARITY_DIR");
}

// A run of the reference as a job spec, its inputs as the reference's files (lossless: the same
// pixels diffusers was given).
boost::json::object case_json(const Reference& ref, const std::string& run, std::uint64_t seed) {
  const auto& r = ref.info["runs"][run];
  auto o = test::parity_case_spec(ref.info["case"], r["guidance"].get<double>(), seed);
  if (r["control"].get<bool>()) {
    o["video"] = ref.info["video"].get<std::string>();
    o["mask_video"] = ref.info["mask"].get<std::string>();
  }
  boost::json::array refs;
  for (int i = 0; i < r["references"].get<int>(); ++i) refs.push_back(boost::json::value(ref.info["references"][i].get<std::string>()));
  if (!refs.empty()) o["reference_images"] = refs;
  if (r["conditioning_scale"].get<double>() != 1.0) o["conditioning_scale"] = r["conditioning_scale"].get<double>();
  if (!r["scheduler"].get<std::string>().empty()) o["scheduler"] = r["scheduler"].get<std::string>();
  return o;
}

std::shared_ptr<WanJob> make_job(Family& family, const boost::json::object& spec) { return test::validated_job<WanJob>(family, spec); }

void check_parity(Reference& ref, const std::string& run) {
  auto family = load_family(ref.info["package"].get<std::string>());
  auto job = make_job(*family, case_json(ref, run, ref.info["seed"].get<std::uint64_t>()));
  const auto steps = test::run_group(*family, {job});
  const int expected = ref.info["runs"][run]["steps_run"].get<int>();
  REQUIRE(static_cast<int>(steps[0].size()) == expected);
  const double worst = test::worst_step_diff(ref, run, steps[0]);  // the reference frames included
  const double frames = test::frames_diff(ref, run, job->frames);
  MESSAGE(run << ": " << expected << " steps, latents " << steps[0][0].sizes() << "; max |vgen - diffusers| latents (every step) = "
              << worst << ", frames = " << frames);
  CHECK(worst <= 1e-4);
  CHECK(frames <= 1e-4);
}

using test::expect_refused;

}  // namespace

TEST_CASE("the packed mask and the reference canvas are diffusers' (shapes, placement)") {
  // 9 frames of 32 x 48: 3 latent frames of 4 x 6, 64 channels, zeros on 2 reference frames.
  auto mask = at::zeros({1, 3, 9, 32, 48});
  mask.select(2, 4).select(2, 9).select(2, 17).fill_(1.0);  // pixel (9, 17) of frame 4: block (1, 2), offset (1, 1)
  const auto packed = wan_vace_packed_mask(mask, 3, 2, 8);
  CHECK(packed.sizes() == at::IntArrayRef({1, 64, 5, 4, 6}));
  CHECK(packed.narrow(2, 0, 2).abs().sum().item<double>() == 0);
  // nearest-exact from 9 frames to 3: latent frame 1 reads frame floor(1.5 * 3) = 4.
  CHECK(packed[0][1 * 8 + 1][2 + 1][1][2].item<double>() == 1.0);
  CHECK(packed.sum().item<double>() == 1.0);
  // A 24 x 40 picture in a 32 x 48 frame: scaled by 1.2 to 28 x 48, 2 white rows above and below.
  const auto canvas = wan_vace_reference_canvas(at::zeros({3, 24, 40}), 32, 48);
  CHECK(canvas.sizes() == at::IntArrayRef({3, 32, 48}));
  CHECK(canvas.narrow(1, 0, 2).min().item<double>() == 1.0);
  CHECK(canvas.narrow(1, 30, 2).min().item<double>() == 1.0);
  CHECK(canvas.narrow(1, 2, 28).max().item<double>() == -1.0);  // black in [-1, 1]
}

TEST_CASE("vgen's Wan VACE reproduces diffusers' WanVACEPipeline, every step and the frames" * doctest::timeout(900)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  SUBCASE("control video, mask, one reference, guidance") { check_parity(*ref, "cfg"); }
  SUBCASE("the same without guidance") { check_parity(*ref, "nocfg"); }
  SUBCASE("two references, conditioning_scale 0.6, FlowMatchEuler") { check_parity(*ref, "refs"); }
  SUBCASE("no control video, mask or reference") { check_parity(*ref, "bare"); }
}

TEST_CASE("the files decode to diffusers' inputs" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto job = make_job(*family, case_json(*ref, "refs", 1));
  CHECK(max_diff(wan_job_video(*job, 4), ref->get("video")) == 0);
  CHECK(max_diff(wan_video_frames(*job, {}, job->spec.mask_video, "mask_video", 4), ref->get("mask")) == 0);
}

TEST_CASE("a batch of two VACE jobs equals each alone" * doctest::timeout(900)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto other = case_json(*ref, "cfg", 77);
  other["prompt"] = "a blue square spinning on a white background";
  other["conditioning_scale"] = 0.4;  // another scale in the same call: per row
  other["reference_images"] = boost::json::array{boost::json::value(ref->info["references"][1].get<std::string>())};
  const std::vector<boost::json::object> specs{case_json(*ref, "cfg", 5), other};
  std::vector<std::shared_ptr<WanJob>> together;
  for (const auto& s : specs) together.push_back(make_job(*family, s));
  test::check_batched_matches_solo(*family, together, [&](std::size_t j) { return make_job(*family, specs[j]); });
  CHECK(max_diff(together[0]->frames, together[1]->frames) > 1e-2);  // the rows differ
}

TEST_CASE("a VACE job joining a running group at step 1 ends within 1e-4 of its solo run" * doctest::timeout(900)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto other = case_json(*ref, "cfg", 77);
  other["prompt"] = "a blue square spinning on a white background";
  other["conditioning_scale"] = 1.5;
  auto make = [&](int i) { return make_job(*family, i == 0 ? case_json(*ref, "cfg", 5) : other); };
  test::check_joined_equals_solo(family, make, 1, "wan2.1-vace");
}

TEST_CASE("the VACE fields are refused, naming the field, by a package without them; strength by a VACE one" *
          doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto t2v = load_family(ref->info["package_t2v"].get<std::string>());
  CHECK(t2v->package().limits.mask_video == InputUse::none);
  auto plain = case_json(*ref, "bare", 1);
  auto with_refs = plain;
  with_refs["reference_images"] = boost::json::array{boost::json::value(ref->info["references"][0].get<std::string>())};
  expect_refused(*t2v, with_refs, "reference_images");
  auto scaled = plain;
  scaled["conditioning_scale"] = 0.5;
  expect_refused(*t2v, scaled, "conditioning_scale");
  auto vace = load_family(ref->info["package"].get<std::string>());
  CHECK(vace->package().family == "wan2.1-vace");
  CHECK(vace->package().limits.video == InputUse::optional);
  CHECK(vace->package().limits.reference_images == InputUse::optional);
  auto strength = case_json(*ref, "cfg", 1);
  strength["strength"] = 0.5;
  expect_refused(*vace, strength, "strength");
  auto lone_mask = plain;
  lone_mask["mask_video"] = ref->info["mask"].get<std::string>();
  expect_refused(*vace, lone_mask, "mask_video");
}
