// SkyReels-V2 diffusion forcing (stages/families/skyreels/skyreels_df_family.hpp) against
// diffusers' SkyReelsV2DiffusionForcingPipeline (text-to-video) and
// SkyReelsV2DiffusionForcingVideoToVideoPipeline (extension), synchronous (ar_step 0), from the
// CTest fixture `stages.skyreels_df_parity_reference` (tools/reference/skyreels_df_parity.py).
#include "stages/families/skyreels/skyreels_df_family.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <string>

#include "runtime/errors.hpp"
#include "stages/job_spec.hpp"
#include "tests/support/family_group.hpp"
#include "tests/support/parity_reference.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;

namespace vgen {
void register_skyreels_df_family();  // the family's registration (cmake/family.cmake)
}

namespace {

using Reference = test::ParityReference;
using test::max_diff;

Reference* reference_or_skip() {
  static const bool registered = (register_skyreels_df_family(), true);  // this family alone, once
  (void)registered;
  return test::parity_reference_or_skip("VGEN_SKYREELS_DF_PARITY_DIR");
}

boost::json::object case_json(const Reference& ref, const std::string& run, std::uint64_t seed) {
  const auto& r = ref.info["runs"][run];
  auto o = test::parity_case_spec(ref.info["case"], r["guidance"].get<double>(), seed);
  o["fps"] = r["fps"].get<int>();
  if (r["video"].get<bool>()) o["video"] = ref.info["video"].get<std::string>();
  return o;
}

std::shared_ptr<SkyReelsJob> make_job(Family& family, const boost::json::object& spec, const at::Tensor& video = {}) {
  auto job = test::validated_job<SkyReelsJob>(family, spec);
  job->video = video;
  return job;
}

void check_parity(Reference& ref, const std::string& run) {
  auto family = load_family(ref.info["package"].get<std::string>());
  auto job = make_job(*family, case_json(ref, run, ref.info["seed"].get<std::uint64_t>()));  // a video from its file
  const auto steps = test::run_group(*family, {job});
  const int expected = ref.info["runs"][run]["steps_run"].get<int>();
  const int prefix = ref.info["runs"][run]["prefix_latent_frames"].get<int>();
  REQUIRE(static_cast<int>(steps[0].size()) == expected);
  // The frames being denoised; the clean prefix is compared in the final latents below.
  const double worst = test::worst_step_diff(ref, run, steps[0], prefix);
  const double final_latents = max_diff(job->state.latents, ref.get(test::step_key(run, expected - 1)));  // decode put the prefix back
  const double frames = test::frames_diff(ref, run, job->frames);
  MESSAGE(run << ": " << expected << " steps, prefix " << prefix << " latent frames; max |vgen - diffusers| latents (every step, "
              << "denoised frames) = " << worst << ", final latents (all frames) = " << final_latents << ", frames = " << frames);
  CHECK(worst <= 1e-4);
  CHECK(final_latents <= 1e-4);
  CHECK(frames <= 1e-4);
}

}  // namespace

TEST_CASE("the overlap is the video's last overlap_history frames, as diffusers' input" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto& df = dynamic_cast<SkyReelsDFFamily&>(*family);
  const int overlap = ref->info["overlap_history"].get<int>();
  CHECK(df.overlap_history() == overlap);
  CHECK(df.prefix_latent_frames() == (overlap - 1) / 4 + 1);
  auto job = make_job(*family, case_json(*ref, "extend", 1));
  const auto video = ref->get("video");
  const auto tail = video.narrow(0, video.size(0) - overlap, overlap);
  CHECK(max_diff(skyreels_overlap_frames(*job, overlap), tail) == 0);  // decoded from the lossless file
  // diffusers returns its input first: the same pixels
  CHECK(max_diff(ref->get("input_extend")[0], video) <= 1e-6);
}

TEST_CASE("vgen's SkyReels-V2 DF reproduces diffusers' DF pipelines, every step and the frames" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  SUBCASE("text-to-video, guidance, 24 fps") { check_parity(*ref, "t2v"); }
  SUBCASE("text-to-video without guidance, 16 fps (the other fps flag)") { check_parity(*ref, "nocfg"); }
  SUBCASE("extension of the video, overlap_history frames") { check_parity(*ref, "extend"); }
}

TEST_CASE("a batch of an extension and a text-to-video job equals each alone" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto other = case_json(*ref, "t2v", 77);
  other["prompt"] = "a blue square spinning on a white background";
  other["fps"] = 16;  // the other fps flag in the same call
  const auto flipped = ref->get("video").flip({3}).contiguous();
  const std::vector<std::pair<boost::json::object, at::Tensor>> specs{{case_json(*ref, "extend", 5), at::Tensor()},
                                                                      {other, at::Tensor()}};
  auto make = [&](std::size_t j) { return make_job(*family, specs[j].first, specs[j].second); };
  std::vector<std::shared_ptr<SkyReelsJob>> together{make(0), make(1)};
  test::check_batched_matches_solo(*family, together, make);
  CHECK(max_diff(together[0]->frames, together[1]->frames) > 1e-2);
  // Two extensions of different videos side by side (the second's frames given: the first's mirrored)
  const std::vector<std::pair<boost::json::object, at::Tensor>> two{{case_json(*ref, "extend", 5), at::Tensor()},
                                                                    {case_json(*ref, "extend", 9), flipped}};
  auto make_two = [&](std::size_t j) { return make_job(*family, two[j].first, two[j].second); };
  std::vector<std::shared_ptr<SkyReelsJob>> pair{make_two(0), make_two(1)};
  test::check_batched_matches_solo(*family, pair, make_two);
}

TEST_CASE("an extension joining a running text-to-video group, and the other way round, each within 1e-4 of solo" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto t2v = [&] { return make_job(*family, case_json(*ref, "t2v", 5)); };
  auto extend = [&] { return make_job(*family, case_json(*ref, "extend", 77)); };
  test::check_joined_equals_solo(family, [&](int i) { return i == 0 ? t2v() : extend(); }, 1, "skyreels-v2-df, extension joins T2V");
  test::check_joined_equals_solo(family, [&](int i) { return i == 0 ? extend() : t2v(); }, 2, "skyreels-v2-df, T2V joins extension");
}

// Extending a finished job's output: its own final latents (FamilyJob::video_latents, what the
// model set finds in stages/exec/result_latents) give the overlap instead of encoding its frames.
TEST_CASE("a finished job's latents are the overlap instead of its re-encoded frames" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto& df = dynamic_cast<SkyReelsDFFamily&>(*family);
  const int p = df.prefix_latent_frames();
  auto first = make_job(*family, case_json(*ref, "t2v", 3));  // the finished job
  test::run_group(*family, {first});
  const auto clip = first->frames.permute({0, 3, 1, 2}).contiguous();  // its decoded frames [F, 3, H, W]
  auto extension = [&](bool reuse) {
    auto job = make_job(*family, case_json(*ref, "extend", 4), clip);
    if (reuse) job->video_latents = first->state.latents;
    return job;
  };
  const auto before = df.prefixes_reused();
  auto reused = extension(true), encoded = extension(false);
  test::run_group(*family, {reused});
  test::run_group(*family, {encoded});
  CHECK(reused->prefix_reused);
  CHECK_FALSE(encoded->prefix_reused);
  CHECK(df.prefixes_reused() == before + 1);
  const auto tail = first->state.latents.narrow(2, first->state.latents.size(2) - p, p);
  CHECK(max_diff(reused->prefix, tail) == 0);  // exactly the finished job's last latent frames
  // What re-encoding the decoded frames would have given instead (the VAE round trip): stated, not bounded.
  MESSAGE("overlap latents, re-encoded frames vs the finished job's own: max |diff| = " << max_diff(encoded->prefix, tail)
          << "; extension frames, reused vs re-encoded: max |diff| = " << max_diff(reused->frames, encoded->frames));
  // Latents of another size are not taken: the frames are encoded.
  auto other = extension(false);
  other->video_latents = first->state.latents.narrow(3, 0, 1);
  test::run_group(*family, {other});
  CHECK_FALSE(other->prefix_reused);
  CHECK(max_diff(other->frames, encoded->frames) == 0);
}

TEST_CASE("refusals name the field" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto short_segment = case_json(*ref, "extend", 1);
  short_segment["frames"] = 5;  // = overlap_history: nothing new
  CHECK_THROWS_WITH_AS(family->validate(short_segment), doctest::Contains("frames:"), Error);
  auto extend = case_json(*ref, "extend", 1);
  extend["extend"] = true;
  extend["frames"] = 5;  // the same check for an extend job (stages/job_spec.cpp, SpecLimits::extend_overlap)
  CHECK_THROWS_WITH_AS(family->validate(extend), doctest::Contains("frames:"), Error);
  extend["frames"] = 9;
  CHECK(family->validate(extend).extend);  // no image needed: this package extends by latents
  auto job = make_job(*family, case_json(*ref, "extend", 1), ref->get("video").narrow(0, 0, 3).contiguous());
  CHECK_THROWS_WITH_AS(skyreels_overlap_frames(*job, 5), doctest::Contains("video:"), Error);
}
