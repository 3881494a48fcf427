// Wan video-to-video (the Wan T2V family with a video, stages/families/wan/wan_v2v.cpp) against
// diffusers' WanVideoToVideoPipeline, from the CTest fixture `stages.wan_v2v_parity_reference`
// (tools/reference/wan_v2v_parity.py).
#include "stages/families/wan/wan_family.hpp"

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
  return test::parity_reference_or_skip("VGEN_WAN_V2V_PARITY_DIR");
}

// The reference case as a job spec with the reference's video file (lossless, the same pixels
// as diffusers' input).
boost::json::object case_json(const Reference& ref, const std::string& run, std::uint64_t seed) {
  const auto& r = ref.info["runs"][run];
  auto o = test::parity_case_spec(ref.info["case"], r["guidance"].get<double>(), seed);
  o["strength"] = r["strength"].get<double>();
  o["video"] = ref.info["video"].get<std::string>();
  if (!r["scheduler"].get<std::string>().empty()) o["scheduler"] = r["scheduler"].get<std::string>();
  return o;
}

std::shared_ptr<WanJob> make_job(Family& family, const boost::json::object& spec, const at::Tensor& video = {}) {
  auto job = test::validated_job<WanJob>(family, spec);
  job->video = video;
  return job;
}

void check_parity(Reference& ref, const std::string& run) {
  auto family = load_family(ref.info["package"].get<std::string>());
  auto job = make_job(*family, case_json(ref, run, ref.info["seed"].get<std::uint64_t>()));  // the video from its file
  const auto steps = test::run_group(*family, {job});
  const int expected = ref.info["runs"][run]["steps_run"].get<int>();
  REQUIRE(static_cast<int>(steps[0].size()) == expected);
  const double worst = test::worst_step_diff(ref, run, steps[0]);
  const double frames = test::frames_diff(ref, run, job->frames);
  MESSAGE(run << ": " << expected << " steps from step " << job->spec.steps - expected << "; max |vgen - diffusers| latents (every step) = "
              << worst << ", frames = " << frames);
  CHECK(worst <= 1e-4);
  CHECK(frames <= 1e-4);
}

}  // namespace

TEST_CASE("t_start is diffusers' get_timesteps") {
  CHECK(wan_v2v_first_step(5, 0.6) == 2);   // int(3.0) = 3 steps run
  CHECK(wan_v2v_first_step(4, 0.6) == 2);   // int(2.4) = 2
  CHECK(wan_v2v_first_step(50, 0.8) == 10);
  CHECK(wan_v2v_first_step(5, 1.0) == 0);
  CHECK(wan_v2v_first_step(5, 0.1) == 5);   // int(0.5) = 0: nothing to run
  CHECK(wan_v2v_first_step(3, 0.99) == 1);  // truncation, not rounding
}

TEST_CASE("the job's video file decodes to diffusers' input frames, cut to 4k+1" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto job = make_job(*family, case_json(*ref, "unipc", 1));
  CHECK(max_diff(wan_job_video(*job, 4), ref->get("video")) == 0);
  job->spec.frames = 7;  // fewer frames asked: the first 5 (4k+1)
  CHECK(wan_job_video(*job, 4).size(0) == 5);
}

TEST_CASE("vgen's Wan V2V reproduces diffusers' WanVideoToVideoPipeline, every step and the frames" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  SUBCASE("UniPC, strength 0.6") { check_parity(*ref, "unipc"); }
  SUBCASE("FlowMatchEuler, strength 0.6") { check_parity(*ref, "euler"); }
  SUBCASE("without guidance") { check_parity(*ref, "nocfg"); }
  SUBCASE("strength 1: every step") { check_parity(*ref, "full"); }
}

TEST_CASE("a V2V job in a batched group is within 1e-4 of its solo run" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  const auto flipped = ref->get("video").flip({3}).contiguous();  // another video: each row keeps its own
  auto other = case_json(*ref, "unipc", 77);
  other["prompt"] = "a blue square spinning on a white background";
  const std::vector<std::pair<boost::json::object, at::Tensor>> specs{{case_json(*ref, "unipc", 5), at::Tensor()}, {other, flipped}};
  std::vector<std::shared_ptr<WanJob>> together;
  for (const auto& [s, v] : specs) together.push_back(make_job(*family, s, v));
  test::check_batched_matches_solo(*family, together, [&](std::size_t j) { return make_job(*family, specs[j].first, specs[j].second); });
  CHECK(max_diff(together[0]->frames, together[1]->frames) > 1e-2);  // the rows differ
}

TEST_CASE("a video is refused, naming the field, by a package without the encoder or at a strength with no step" *
          doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  using test::expect_refused;
  auto t2v = load_family(ref->info["package_t2v"].get<std::string>());
  CHECK(t2v->package().limits.video == InputUse::none);
  expect_refused(*t2v, case_json(*ref, "unipc", 1), "video");
  auto v2v = load_family(ref->info["package"].get<std::string>());
  auto weak = case_json(*ref, "unipc", 1);
  weak["strength"] = 0.1;  // int(5 * 0.1) = 0 steps
  expect_refused(*v2v, weak, "strength");
  auto ddim = case_json(*ref, "unipc", 1);
  ddim["scheduler"] = "DDIMScheduler";
  expect_refused(*v2v, ddim, "scheduler");
  // Without a video the package is a text-to-video one: the same seed draws the same noise.
  auto plain = case_json(*ref, "unipc", 1);
  plain.erase("video");
  plain.erase("strength");
  auto job = make_job(*v2v, plain);
  v2v->prepare("cpu", {job.get()});
  CHECK(job->state.step == 0);
  CHECK(job->state.scheduler.empty());
}
