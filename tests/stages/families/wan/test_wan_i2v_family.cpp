#include "stages/families/wan/wan_i2v_family.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "runtime/errors.hpp"
#include "tests/support/family_group.hpp"
#include "tests/support/parity_reference.hpp"
#include "tests/support/temp_dir.hpp"
#include "stages/job_spec.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

// The tiny Wan 2.1 I2V package and diffusers' WanImageToVideoPipeline on one case, from the
// CTest fixture `stages.wan_i2v_parity_reference` (tools/reference/wan_i2v_parity.py).
using Reference = test::ParityReference;

// The reference of the fixture whose directory is in the environment variable `env` (null, with
// a warning, without one: the case is skipped).
Reference* reference_from(const std::string& env) {
  register_builtin_families();  // as ModelSet does
  return test::parity_reference_or_skip(env);
}

Reference* reference_or_skip() { return reference_from("VGEN_WAN_I2V_PARITY_DIR"); }

// The reference case as a job spec; its image is the reference's PNG (the same pixels as
// diffusers' input, already at the video size).
boost::json::object case_json(const Reference& ref, std::uint64_t seed, double guidance) {
  auto o = test::parity_case_spec(ref.info["case"], guidance, seed);
  o["image"] = ref.info["image"].get<std::string>();
  return o;
}

// A job of `family` for `spec`, validated as the runtime validates it; `image`, when given,
// replaces the spec's picture (wan_job_image takes a job's own tensor first).
std::shared_ptr<WanJob> make_job(Family& family, const boost::json::object& spec, const at::Tensor& image = {}) {
  auto job = test::validated_job<WanJob>(family, spec);
  job->image = image;
  return job;
}

using test::max_diff;
using test::run_group;

void check_parity(Reference& ref, const std::string& name, double guidance) {
  auto family = load_family(ref.info["package"].get<std::string>());
  // The job's image comes from the PNG through stages/media/image_input, as in a real job.
  auto job = make_job(*family, case_json(ref, ref.info["seed"].get<std::uint64_t>(), guidance));
  auto steps = run_group(*family, {job})[0];
  CHECK(max_diff(job->condition.narrow(1, 0, 1), at::zeros_like(job->condition.narrow(1, 0, 1))) > 0);  // the mask is set
  CHECK(max_diff(wan_job_image(*make_job(*family, case_json(ref, 1, 1.0))), ref.get("image")) == 0);
  CHECK(max_diff(job->image_embeds, ref.get("image_embeds")) <= 1e-5);
  const int n = ref.info["steps"].get<int>();
  REQUIRE(static_cast<int>(steps.size()) == n);
  const double worst = test::worst_step_diff(ref, name, steps);
  const double frames = test::frames_diff(ref, name, job->frames);
  MESSAGE(name << ": max |vgen - diffusers| latents (every step) = " << worst << ", frames = " << frames);
  CHECK(worst <= 1e-4);
  CHECK(frames <= 1e-3);
}

}  // namespace

TEST_CASE("a wan2.1-i2v package loads as the image-to-video family" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  CHECK(dynamic_cast<WanI2VFamily*>(family.get()) != nullptr);
  CHECK(family->package().family == "wan2.1-i2v");
}

TEST_CASE("vgen's Wan I2V family reproduces diffusers' WanImageToVideoPipeline, every step and the frames" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  SUBCASE("with guidance") { check_parity(*ref, "i2v", ref->info["case"]["guidance_scale"].get<double>()); }
  SUBCASE("without guidance") { check_parity(*ref, "nocfg", 1.0); }
}

TEST_CASE("an I2V job in a batched group is within 1e-4 of its solo run" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  const auto flipped = ref->get("image").flip({2}).contiguous();  // another image: each row keeps its own
  auto other = case_json(*ref, 77, 5.0);
  other["prompt"] = "a blue square spinning on a white background";
  const std::vector<std::pair<boost::json::object, at::Tensor>> specs{{case_json(*ref, 5, 5.0), at::Tensor()}, {other, flipped}};
  std::vector<std::shared_ptr<WanJob>> together;
  for (const auto& [s, img] : specs) together.push_back(make_job(*family, s, img));
  test::check_batched_matches_solo(*family, together, [&](std::size_t j) { return make_job(*family, specs[j].first, specs[j].second); });
  // The two rows differ (the check above is not comparing a job with itself).
  CHECK(max_diff(together[0]->frames, together[1]->frames) > 1e-2);
}

TEST_CASE("I2V validation names the image; a job without one is refused before any model call" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto spec = case_json(*ref, 1, 5.0);
  spec.erase("image");
  try {
    family->validate(spec);
    FAIL("a spec without an image was accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).rfind("image:", 0) == 0);
  }
  auto job = make_job(*family, case_json(*ref, 1, 5.0));
  job->spec.image.clear();  // as if validation had been skipped
  CHECK_THROWS_WITH_AS(family->prepare("cpu", {job.get()}), doctest::Contains("image"), Error);
  // A file that is gone by the time the job runs: named, not a crash.
  auto gone = make_job(*family, case_json(*ref, 1, 5.0));
  gone->spec.image = "/nonexistent/vgen-test.png";
  CHECK_THROWS_WITH_AS(family->prepare("cpu", {gone.get()}), doctest::Contains("image"), Error);
  // An image of another size than the job's is refused, not silently broadcast.
  auto wrong = make_job(*family, case_json(*ref, 1, 5.0), at::zeros({3, 16, 16}));
  CHECK_THROWS_WITH_AS(family->prepare("cpu", {wrong.get()}), doctest::Contains("image"), Error);
}

TEST_CASE("I2V warm-up calls every module on a blank image" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  CHECK_NOTHROW(family->warm_up("cpu"));
}

// ---------------------------------------------------------------- first and last frame (FLF2V)
namespace {

// The tiny Wan 2.1 FLF2V package and WanImageToVideoPipeline with `last_image`, from the CTest
// fixture `stages.wan_flf2v_parity_reference` (tools/reference/wan_flf2v_parity.py).
Reference* flf2v_reference_or_skip() { return reference_from("VGEN_WAN_FLF2V_PARITY_DIR"); }

boost::json::object flf2v_json(const Reference& ref, std::uint64_t seed, double guidance) {
  auto o = case_json(ref, seed, guidance);
  o["last_image"] = ref.info["last_image"].get<std::string>();
  return o;
}

}  // namespace

TEST_CASE("a wan2.1-flf2v package is the I2V family with a last frame; it requires last_image" * doctest::timeout(300)) {
  auto* ref = flf2v_reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto* i2v = dynamic_cast<WanI2VFamily*>(family.get());
  REQUIRE(i2v != nullptr);
  CHECK(i2v->first_last_frame());
  CHECK(family->package().family == "wan2.1-flf2v");
  CHECK(family->validate(flf2v_json(*ref, 1, 5.0)).last_image == ref->info["last_image"].get<std::string>());
  auto without = case_json(*ref, 1, 5.0);  // no last_image
  CHECK_THROWS_WITH_AS(family->validate(without), doctest::Contains("last_image: required"), Error);
  auto one_frame = flf2v_json(*ref, 1, 5.0);
  one_frame["frames"] = 1;
  CHECK_THROWS_WITH_AS(family->validate(one_frame), doctest::Contains("frames:"), Error);
  // A last image the job cannot read is named when the job runs.
  auto gone = make_job(*family, flf2v_json(*ref, 1, 5.0));
  gone->spec.last_image = "/nonexistent/vgen-last.png";
  CHECK_THROWS_WITH_AS(family->prepare("cpu", {gone.get()}), doctest::Contains("last_image"), Error);
  CHECK_NOTHROW(family->warm_up("cpu"));
}

TEST_CASE("vgen's FLF2V reproduces diffusers' WanImageToVideoPipeline with last_image, every step and the frames" *
          doctest::timeout(600)) {
  auto* ref = flf2v_reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  for (const auto& [name, g] : {std::pair<std::string, double>{"flf2v", 5.0}, {"nocfg", 1.0}}) {
    auto job = make_job(*family, flf2v_json(*ref, ref->info["seed"].get<std::uint64_t>(), g));
    auto steps = run_group(*family, {job})[0];
    const double tokens = max_diff(job->image_embeds, ref->get("image_embeds"));
    REQUIRE(static_cast<int>(steps.size()) == ref->info["steps"].get<int>());
    const double worst = test::worst_step_diff(*ref, name, steps);
    const double frames = test::frames_diff(*ref, name, job->frames);
    MESSAGE(name << ": max |vgen - diffusers| image tokens = " << tokens << ", latents (every step) = " << worst
                 << ", frames = " << frames);
    CHECK(tokens <= 1e-5);
    CHECK(worst <= 1e-3);
    CHECK(frames <= 1e-3);
  }
}

TEST_CASE("an FLF2V job in a batched group is within 1e-4 of its solo run" * doctest::timeout(600)) {
  auto* ref = flf2v_reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto swapped = flf2v_json(*ref, 9, 5.0);  // the same pictures the other way round
  swapped["image"] = ref->info["last_image"].get<std::string>();
  swapped["last_image"] = ref->info["image"].get<std::string>();
  const std::vector<boost::json::object> specs{flf2v_json(*ref, 9, 5.0), swapped};
  std::vector<std::shared_ptr<WanJob>> together;
  for (const auto& s : specs) together.push_back(make_job(*family, s));
  const auto batched = run_group(*family, together);
  for (std::size_t j = 0; j < specs.size(); ++j) {
    auto solo_job = make_job(*family, specs[j]);
    const auto solo = run_group(*family, {solo_job});
    double worst = 0;
    for (std::size_t i = 0; i < solo[0].size(); ++i) worst = std::max(worst, max_diff(batched[j][i], solo[0][i]));
    const double frames = max_diff(together[j]->frames, solo_job->frames);
    MESSAGE("flf2v job " << j << ": batched vs solo latents " << worst << ", frames " << frames);
    CHECK(worst <= 1e-4);
    CHECK(frames <= 1e-4);
  }
  CHECK(max_diff(together[0]->frames, together[1]->frames) > 1e-2);  // the order of the pictures matters
}

// ---------------------------------------------------------------- two experts (Wan 2.2 I2V-A14B)
namespace {

// The tiny two-expert WanImageToVideoPipeline (36-channel experts, no image encoder) and its
// "wan2.2-a14b-i2v" package, from the CTest fixture `stages.wan_a14b_i2v_parity_reference`
// (tools/reference/wan_a14b_i2v_parity.py): the Wan 2.1 I2V case and image.
Reference* a14b_reference_or_skip() { return reference_from("VGEN_WAN_A14B_I2V_PARITY_DIR"); }


}  // namespace

TEST_CASE("a wan2.2-a14b-i2v package is the I2V family with two experts and no image encoder" * doctest::timeout(300)) {
  auto* ref = a14b_reference_or_skip();
  if (!ref) return;
  // The reference case switches expert inside the loop (else this would test one model).
  std::set<std::string> experts;
  for (const auto& e : ref->info["experts"]) experts.insert(e.get<std::string>());
  REQUIRE(experts.size() == 2);
  auto family = load_family(ref->info["package"].get<std::string>());
  auto* i2v = dynamic_cast<WanI2VFamily*>(family.get());
  REQUIRE(i2v != nullptr);
  CHECK(family->package().family == "wan2.2-a14b-i2v");
  CHECK_FALSE(i2v->image_tokens());
  CHECK_FALSE(i2v->first_last_frame());
  auto spec = case_json(*ref, 1, 5.0);
  spec.erase("image");
  CHECK_THROWS_WITH_AS(family->validate(spec), doctest::Contains("image:"), Error);
  auto lora = case_json(*ref, 1, 5.0);
  lora["loras"] = boost::json::array{boost::json::object{{"name", "any.safetensors"}}};
  CHECK_THROWS_WITH_AS(family->validate(lora), doctest::Contains("loras"), Error);
  CHECK_NOTHROW(family->warm_up("cpu"));  // both experts, the VAE encoder, no image encoder
}

TEST_CASE("a package whose image_conditioning.image_encoder is not a bool, or that needs a missing encoder, is refused by name" *
          doctest::timeout(300)) {
  auto* ref = a14b_reference_or_skip();
  if (!ref) return;
  const fs::path src = ref->info["package"].get<std::string>();
  const auto edited = [&](const fs::path& dir, const nlohmann::json& value) {
    fs::copy(src, dir, fs::copy_options::recursive);
    std::ifstream in(dir / "manifest.json");
    auto m = nlohmann::json::parse(in);
    in.close();
    m["image_conditioning"]["image_encoder"] = value;
    std::ofstream(dir / "manifest.json") << m.dump();
    return dir;
  };
  test::TempDir tmp;
  CHECK_THROWS_WITH_AS(load_family(edited(tmp / "string", "no")), doctest::Contains("image_conditioning.image_encoder"), Error);
  // A package that says it has an image encoder must list one (a Wan 2.1 I2V package without it).
  CHECK_THROWS_WITH_AS(load_family(edited(tmp / "true", true)), doctest::Contains("image_encoder"), Error);
}

TEST_CASE("vgen's A14B I2V reproduces diffusers' two-expert WanImageToVideoPipeline, every step and the frames" *
          doctest::timeout(600)) {
  auto* ref = a14b_reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  for (const auto& [name, g] : {std::pair<std::string, double>{"a14b_i2v", 5.0}, {"nocfg", 1.0}}) {
    auto job = make_job(*family, case_json(*ref, ref->info["seed"].get<std::uint64_t>(), g));
    auto steps = run_group(*family, {job})[0];
    CHECK_FALSE(job->image_embeds.defined());
    CHECK(job->condition.size(1) == 4 + 16);  // mask + condition latents: 36 input channels with the noise
    double worst = 0;
    for (int i = 0; i < ref->info["steps"].get<int>(); ++i) {
      const double d = max_diff(steps[static_cast<std::size_t>(i)], ref->get(test::step_key(name, i)));
      MESSAGE(name << ": step " << i << " (" << ref->info["experts"][i].get<std::string>() << ") latents max |vgen - diffusers| = " << d);
      worst = std::max(worst, d);
    }
    const double frames = test::frames_diff(*ref, name, job->frames);
    MESSAGE(name << ": max |vgen - diffusers| latents (every step) = " << worst << ", frames = " << frames);
    CHECK(worst <= 1e-3);
    CHECK(frames <= 1e-3);
  }
}

TEST_CASE("A14B I2V: a batched job, and a job joining a running group mid-denoise, are within 1e-4 of their solo runs" *
          doctest::timeout(600)) {
  auto* ref = a14b_reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  const auto flipped = ref->get("image").flip({2}).contiguous();  // another image: each row keeps its own
  auto other = case_json(*ref, 77, 5.0);
  other["prompt"] = "a blue square spinning on a white background";
  const std::vector<std::pair<boost::json::object, at::Tensor>> specs{{case_json(*ref, 5, 5.0), at::Tensor()}, {other, flipped}};
  auto job = [&](std::size_t j) { return make_job(*family, specs[j].first, specs[j].second); };
  std::vector<std::shared_ptr<WanJob>> solo_jobs{job(0), job(1)};
  std::vector<std::vector<at::Tensor>> solo;
  for (auto& s : solo_jobs) solo.push_back(run_group(*family, {s})[0]);
  CHECK(max_diff(solo_jobs[0]->frames, solo_jobs[1]->frames) > 1e-2);  // the two rows differ

  SUBCASE("batched in one group") {
    std::vector<std::shared_ptr<WanJob>> together{job(0), job(1)};
    const auto batched = run_group(*family, together);
    for (std::size_t j = 0; j < 2; ++j) {
      const double latents = test::worst_step(batched[j], solo[j]), frames = max_diff(together[j]->frames, solo_jobs[j]->frames);
      MESSAGE("a14b i2v job " << j << ": batched vs solo latents " << latents << ", frames " << frames);
      CHECK(latents <= 1e-4);
      CHECK(frames <= 1e-4);
    }
  }
  SUBCASE("the second joins after one or two of the first's steps") {
    auto& wan = dynamic_cast<WanFamily&>(*family);
    const auto ts = family->make_scheduler(*solo_jobs[0])->timesteps();
    for (int join_at : {1, 2}) {
      // At step 2 the first job is past the boundary and the joiner is not: one call, two experts.
      const bool two_experts = wan.expert_for(ts[join_at].item<double>()) != wan.expert_for(ts[0].item<double>());
      CHECK(two_experts == (join_at == 2));
      auto first = job(0), late = job(1);
      const auto runs = test::run_joined(*family, first, late, join_at);
      const std::vector<std::shared_ptr<WanJob>> pair{first, late};
      for (std::size_t j = 0; j < 2; ++j) {
        const double latents = test::worst_step(runs[j], solo[j]), frames = max_diff(pair[j]->frames, solo_jobs[j]->frames);
        MESSAGE("a14b i2v, joined at step " << join_at << ", job " << j << ": vs solo latents " << latents << ", frames " << frames);
        CHECK(latents <= 1e-4);
        CHECK(frames <= 1e-4);
      }
    }
  }
}

// Issue 20: a job joining a running group mid-denoise (the real Batcher and step loop) ends as
// it would alone, and so does the job it joined.
TEST_CASE("an I2V job joining a running group at step 1 ends within 1e-4 of its solo run" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  const auto flipped = ref->get("image").flip({2}).contiguous();
  auto other = case_json(*ref, 77, 5.0);
  other["prompt"] = "a blue square spinning on a white background";
  auto make = [&](int i) { return i == 0 ? make_job(*family, case_json(*ref, 5, 5.0)) : make_job(*family, other, flipped); };
  test::check_joined_equals_solo(family, make, 1, "wan2.1-i2v");
}

TEST_CASE("an FLF2V job joining a running group at step 2 ends within 1e-4 of its solo run" * doctest::timeout(600)) {
  auto* ref = flf2v_reference_or_skip();
  if (!ref) return;
  auto family = load_family(ref->info["package"].get<std::string>());
  auto swapped = flf2v_json(*ref, 9, 5.0);
  swapped["image"] = ref->info["last_image"].get<std::string>();
  swapped["last_image"] = ref->info["image"].get<std::string>();
  auto make = [&](int i) { return make_job(*family, i == 0 ? flf2v_json(*ref, 9, 5.0) : swapped); };
  test::check_joined_equals_solo(family, make, 2, "wan2.1-flf2v");
}
