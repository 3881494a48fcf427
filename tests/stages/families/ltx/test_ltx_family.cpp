#include "stages/families/ltx/ltx_family.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "runtime/errors.hpp"
#include "stages/exec/model_set.hpp"
#include "stages/exec/preview.hpp"
#include "tests/support/family_group.hpp"
#include "tests/support/parity_reference.hpp"
#include "tests/support/python_reference.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

using Reference = test::ParityReference;

// Written once by the CTest fixture `stages.ltx_parity_reference` (tools/reference/ltx_parity.py).
Reference* reference_or_skip() { return test::parity_reference_or_skip("VGEN_LTX_PARITY_DIR"); }

struct OutDir {
  fs::path path = vgen::test::temp_dir("vgen-ltx-out-");
  ~OutDir() { fs::remove_all(path); }
};

// Every step's latents and the frames of each job, captured around the real stages.
struct Capture {
  std::mutex m;
  std::map<std::string, at::Tensor> frames;
  std::map<std::string, std::vector<at::Tensor>> steps;
};

std::vector<StageSpec> capturing(std::vector<StageSpec> stages, Capture& cap) {
  for (auto& s : stages) {
    auto inner = s.fn;
    const auto name = s.name;
    s.fn = [inner, name, &cap](Job& job) -> asio::awaitable<void> {
      if (name == "denoise")  // after the job's own hook (its previews), if any
        family_job(job)->on_step = [&cap, id = job.id(), own = family_job(job)->on_step](int step, const at::Tensor& latents) {
          if (own) own(step, latents);
          std::lock_guard l(cap.m);
          cap.steps[id].push_back(latents.clone());
        };
      co_await inner(job);
      if (name == "decode") {
        std::lock_guard l(cap.m);
        cap.frames[job.id()] = family_job(job)->frames.clone();
      }
    };
  }
  return stages;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

std::vector<std::shared_ptr<Job>> run_jobs(const fs::path& package, const std::vector<boost::json::object>& jobs,
                                          Capture& cap, const fs::path& out_dir,
                                          std::shared_ptr<ModelSet>* keep = nullptr, std::size_t max_batch = 1,
                                          int preview_every = 0) {
  const auto specs = parse_device_list("cpu");
  Executor executor({.io_threads = 1});
  add_device_pools(executor, specs);
  DevicePool pool(specs);
  ModelSetOptions options;
  options.out_dir = out_dir;
  options.batching.max_batch = max_batch;
  options.batching.wait = std::chrono::seconds(20);  // every job joins (they arrive well within it)
  options.preview_every = preview_every;
  auto models = std::make_shared<ModelSet>(std::vector<std::pair<std::string, fs::path>>{{"m", package}}, executor, pool, options);
  if (keep) *keep = models;
  Pipeline pipeline(executor.get_executor(), capturing(models->stages(), cap));
  pipeline.start();
  auto submit_all = [&]() -> asio::awaitable<std::vector<std::shared_ptr<Job>>> {
    std::vector<std::shared_ptr<Job>> out;
    for (const auto& j : jobs) out.push_back(co_await pipeline.submit(j));
    co_await pipeline.drain();
    co_return out;
  };
  auto done = executor.run_sync(submit_all());
  executor.stop();
  return done;
}

boost::json::object case_json(const nlohmann::json& c, std::uint64_t seed) {
  auto o = test::parity_case_spec(c, c["guidance_scale"].get<double>(), seed);
  o["fps"] = c["frame_rate"].get<double>();
  return o;
}

template <typename Fn>
void check_invalid(Fn&& fn, const std::string& needle) {
  try {
    fn();
    FAIL("expected Error(invalid_argument) mentioning " << needle);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("packing latents to tokens is LTXPipeline's patch-size-1 permutation, and unpacking inverts it") {
  auto x = at::arange(2 * 3 * 2 * 2 * 4, at::kFloat).reshape({2, 3, 2, 2, 4});
  auto tokens = ltx_pack(x);
  REQUIRE(tokens.sizes() == at::IntArrayRef({2, 16, 3}));
  // Token (f, h, w) holds the channels of that position, in f-major order.
  CHECK(at::equal(tokens[1][1 * 8 + 0 * 4 + 3], x.index({1, at::indexing::Slice(), 1, 0, 3})));
  CHECK(at::equal(ltx_unpack(tokens, 2, 2, 4), x));
}

TEST_CASE("rope coordinates: frame index * temporal_scale / fps, row and column * spatial_scale") {
  ModelPackage p;
  p.temporal_scale = 8;
  p.spatial_scale = 32;
  const auto c = ltx_video_coords(2, 1, 3, 25.0, p, LtxConfig{});
  REQUIRE(c.sizes() == at::IntArrayRef({1, 3, 6}));
  const auto expect_f = at::tensor({0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}) * (8.0 / 25.0);
  CHECK(at::equal(c[0][0], expect_f));
  CHECK(at::equal(c[0][1], at::zeros({6})));
  CHECK(at::equal(c[0][2], at::tensor({0.0f, 32.0f, 64.0f, 0.0f, 32.0f, 64.0f})));
}

TEST_CASE("the manifest's LTX sections are read, and what vgen cannot run is refused by name") {
  ModelPackage p;
  p.dir = "pkg";
  boost::json::object m;
  check_invalid([&] { read_ltx_config(p, m); }, "'transformer'");
  m = {{"transformer", {{"patch_size", 1}, {"patch_size_t", 1}}},
       {"vae", {{"scaling_factor", 1.0}, {"timestep_conditioning", true}, {"decode_timestep", 0.05}}}};
  const auto c = read_ltx_config(p, m);
  CHECK(c.timestep_conditioning);
  CHECK(c.decode_timestep == 0.05);
  CHECK(c.decode_noise_scale == 0.05);  // LTXPipeline: the noise scale defaults to the decode timestep
  m["transformer"].as_object()["patch_size"] = 2;
  check_invalid([&] { read_ltx_config(p, m); }, "patch_size");
  m["transformer"].as_object()["patch_size"] = 1;
  m["vae"].as_object()["scaling_factor"] = "x";
  check_invalid([&] { read_ltx_config(p, m); }, "vae.scaling_factor");
  check_invalid([&] { read_ltx_config(p); }, "'transformer'");  // a package built in memory: no manifest sections
  p.manifest = m;  // the package's own manifest, as load_model_package keeps it
  check_invalid([&] { read_ltx_config(p); }, "vae.scaling_factor");
}

TEST_CASE("vgen's LTX stages reproduce diffusers' LTXPipeline (with and without guidance)" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const OutDir out;
  const auto seed = ref->info["seed"].get<std::uint64_t>();
  const auto& cases = ref->info["cases"];
  Capture cap;
  auto jobs = run_jobs(ref->info["package"].get<std::string>(), {case_json(cases["cfg"], seed), case_json(cases["nocfg"], seed)},
                       cap, out.path);
  REQUIRE(jobs.size() == 2);
  const char* names[] = {"cfg", "nocfg"};
  for (std::size_t n = 0; n < 2; ++n) {
    const std::string name = names[n];
    CAPTURE(name);
    REQUIRE_MESSAGE(jobs[n]->state() == JobState::done, jobs[n]->snapshot().error);
    const auto& got = cap.steps[jobs[n]->id()];
    const int steps = cases[name]["num_inference_steps"].get<int>();
    REQUIRE(static_cast<int>(got.size()) == steps);
    const double worst = test::worst_step_diff(*ref, name, got);
    const double frames = test::frames_diff(*ref, name, cap.frames[jobs[n]->id()]);
    MESSAGE(name << ": max |vgen - diffusers| over every step's latents = " << worst << ", over frames = " << frames);
    CHECK(worst <= 1e-4);
    CHECK(frames <= 1e-3);
  }
}

TEST_CASE("cross-job batching: jobs with different prompts, seeds, guidance and fps share calls; each equals its solo run" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const OutDir out;
  const auto pkg = ref->info["package"].get<std::string>();
  std::vector<boost::json::object> specs;
  const char* prompts[] = {"a red circle moving left", "a blue square moving up", "a green triangle"};
  const double fps[] = {24.0, 25.0, 30.0};
  for (int i = 0; i < 3; ++i) {
    auto s = case_json(ref->info["cases"]["cfg"], 300 + i);
    s["prompt"] = prompts[i];
    s["guidance"] = 2.0 + i;
    s["fps"] = fps[i];
    specs.push_back(s);
  }
  Capture batched;
  std::shared_ptr<ModelSet> models;
  auto jobs = run_jobs(pkg, specs, batched, out.path, &models, 3);
  const auto groups = models->group_sizes("denoise");
  CHECK(groups.size() == 1);
  CHECK(groups.count(3) == 1);  // one transformer batch of three jobs
  double worst = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    REQUIRE_MESSAGE(jobs[i]->state() == JobState::done, jobs[i]->snapshot().error);
    Capture alone;
    auto single = run_jobs(pkg, {specs[i]}, alone, out.path);
    const auto& a = alone.steps[single[0]->id()];
    const auto& b = batched.steps[jobs[i]->id()];
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k) worst = std::max(worst, max_diff(a[k], b[k]));
    worst = std::max(worst, max_diff(alone.frames[single[0]->id()], batched.frames[jobs[i]->id()]));
  }
  MESSAGE("batched vs solo: max |diff| over latents and frames = " << worst);
  CHECK(worst <= 1e-4);
  // Jobs differ from one another (a batch that mixed up rows would not).
  CHECK(max_diff(batched.frames[jobs[0]->id()], batched.frames[jobs[1]->id()]) > 1e-3);
}

TEST_CASE("LTX job limits come from the manifest: sizes multiple of 32, frames 8k+1, the package's scheduler") {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  CHECK(family->package().family == "ltx-video");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "x"}, {"width", 48}}); }, "width");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "x"}, {"frames", 13}}); }, "frames");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "x"}, {"scheduler", "UniPCMultistepScheduler"}}); },
                "scheduler");
  const auto spec = family->validate(boost::json::object{{"prompt", "x"}});
  CHECK(spec.frames == 9);
  CHECK(spec.width == 64);
  CHECK(spec.fps == 25.0);
  CHECK(spec.negative_prompt.empty());  // LTXPipeline's negative prompt when none is given
}

// Issue 21 for LTX: the exporter fits preview factors against the LTX decoder (through its
// un-normalisation and decode timestep), so an LTX job gets previews, and on the tiny package
// the preview at a step beats a flat grey image against the decoded frame of the same latents.
TEST_CASE("LTX previews: the package has factors, a job gets them, and they beat grey against the decoded frame" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const fs::path pkg = ref->info["package"].get<std::string>();
  register_builtin_families();
  auto family = load_family(pkg);
  const auto preview = LatentPreview::of_package(family->package());
  REQUIRE_MESSAGE(preview, "the LTX exporter wrote no preview.latent_rgb");

  // Through the stages: previews every step (and at the last) as the job's events.
  const auto& c = ref->info["cases"]["cfg"];
  const OutDir out;
  Capture cap;
  auto jobs = run_jobs(pkg, {case_json(c, 5)}, cap, out.path, nullptr, 1, /*preview_every=*/1);
  REQUIRE_MESSAGE(jobs[0]->state() == JobState::done, jobs[0]->snapshot().error);
  const auto last = latest_preview(*jobs[0]);
  REQUIRE(last);
  CHECK(last->step == c["num_inference_steps"].get<int>());
  CHECK(last->content_type == "image/png");
  CHECK(last->width == c["width"].get<int>());  // latents upscaled by the spatial scale (32)

  // Against the decoder, at every step of the captured loop.
  auto psnr = [](const at::Tensor& a, const at::Tensor& b) {
    const double mse = (a.to(at::kDouble) - b.to(at::kDouble)).pow(2).mean().item<double>();
    return 10.0 * std::log10(1.0 / std::max(mse, 1e-12));
  };
  const auto& steps = cap.steps[jobs[0]->id()];
  REQUIRE(!steps.empty());
  const auto spec = family->validate(case_json(c, 5));
  double worst_margin = 1e9;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    auto decoded = family->create_job(spec);
    decoded->state.latents = steps[i].clone();
    family->decode("cpu", {decoded.get()});  // no decode noise: the latents themselves
    const int mid = preview->middle_frame(steps[i]);
    const auto frame = decoded->frames[preview->decoded_frame(mid)];
    const auto shown = preview->image(steps[i], mid, family->package().spatial_scale);
    REQUIRE(shown.sizes() == frame.sizes());
    const double p = psnr(shown, frame), grey = psnr(at::full_like(frame, 0.5), frame);
    MESSAGE("LTX step " << i + 1 << "/" << steps.size() << ": preview PSNR " << p << " dB, grey " << grey << " dB");
    CHECK(p > grey);
    worst_margin = std::min(worst_margin, p - grey);
  }
  MESSAGE("LTX: smallest margin over grey: " << worst_margin << " dB");
}

TEST_CASE("an LTX job refuses a shift and LoRAs instead of ignoring them") {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "p"}, {"shift", 5}}); }, "shift: not settable");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "p"}, {"loras", boost::json::array{boost::json::object{{"name", "x"}}}}}); },
                "loras: not supported");
}

// ---------------------------------------------------------------- image-to-video (LTXImageToVideoPipeline)
namespace {

// The reference's I2V case `name` as a job of the package, its image the reference's PNG (at
// the video size) or, when given, `image` instead.
std::shared_ptr<LtxJob> i2v_job(Family& family, Reference& ref, const std::string& name, std::uint64_t seed,
                                const at::Tensor& image = {}) {
  auto spec = case_json(ref.info["i2v_cases"][name], seed);
  spec["image"] = ref.info["image"].get<std::string>();
  auto job = std::static_pointer_cast<LtxJob>(family.create_job(family.validate(spec)));
  job->image = image;
  return job;
}


}  // namespace

TEST_CASE("vgen's LTX image-to-video reproduces diffusers' LTXImageToVideoPipeline, every step and the frames" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  const auto seed = ref->info["seed"].get<std::uint64_t>();
  for (const std::string name : {"i2v", "i2v_nocfg"}) {
    auto job = i2v_job(*family, *ref, name, seed);
    const auto steps = test::run_group(*family, {job})[0];
    REQUIRE(job->condition.defined());
    double worst = 0;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const double d = max_diff(steps[i], ref->get(test::step_key(name, static_cast<int>(i))));
      MESSAGE(name << ": step " << i << " latents max |vgen - diffusers| = " << d);
      worst = std::max(worst, d);
      CHECK(max_diff(steps[i].narrow(2, 0, 1), job->condition) == 0);  // the given frame is never stepped
    }
    REQUIRE(static_cast<int>(steps.size()) == ref->info["i2v_cases"][name]["num_inference_steps"].get<int>());
    const double frames = test::frames_diff(*ref, name, job->frames);
    MESSAGE(name << ": max |vgen - diffusers| latents (every step) = " << worst << ", frames = " << frames);
    CHECK(worst <= 1e-3);
    CHECK(frames <= 1e-3);
  }
}

TEST_CASE("LTX image-to-video: batched and joined-mid-denoise jobs are within 1e-4 of their solo runs" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  const auto flipped = ref->get("image").flip({2}).contiguous();
  auto job = [&](int j) { return j == 0 ? i2v_job(*family, *ref, "i2v", 5) : i2v_job(*family, *ref, "i2v", 77, flipped); };
  std::vector<std::shared_ptr<LtxJob>> solo_jobs{job(0), job(1)};
  std::vector<std::vector<at::Tensor>> solo;
  for (auto& s : solo_jobs) solo.push_back(test::run_group(*family, {s})[0]);
  CHECK(max_diff(solo_jobs[0]->frames, solo_jobs[1]->frames) > 1e-3);  // the rows differ
  // A text-to-video job of the same shape denoises in another group (one timestep per row).
  auto t2v = std::static_pointer_cast<LtxJob>(family->create_job(family->validate(case_json(ref->info["i2v_cases"]["i2v"], 5))));
  family->prepare("cpu", {t2v.get()});
  auto scheduler = family->make_scheduler(*t2v);
  CHECK(family->denoise_key(*t2v, *scheduler) != family->denoise_key(*solo_jobs[0], *scheduler));

  SUBCASE("batched in one group") {
    std::vector<std::shared_ptr<LtxJob>> together{job(0), job(1)};
    const auto batched = test::run_group(*family, together);
    for (std::size_t j = 0; j < 2; ++j) {
      const double latents = test::worst_step(batched[j], solo[j]), frames = max_diff(together[j]->frames, solo_jobs[j]->frames);
      MESSAGE("ltx i2v job " << j << ": batched vs solo latents " << latents << ", frames " << frames);
      CHECK(latents <= 1e-4);
      CHECK(frames <= 1e-4);
    }
  }
  SUBCASE("the second joins after one or two of the first's steps") {
    for (int join_at : {1, 2}) {
      auto first = job(0), late = job(1);
      const auto runs = test::run_joined(*family, first, late, join_at);
      const std::vector<std::shared_ptr<LtxJob>> pair{first, late};
      for (std::size_t j = 0; j < 2; ++j) {
        const double latents = test::worst_step(runs[j], solo[j]), frames = max_diff(pair[j]->frames, solo_jobs[j]->frames);
        MESSAGE("ltx i2v, joined at step " << join_at << ", job " << j << ": vs solo latents " << latents << ", frames " << frames);
        CHECK(latents <= 1e-4);
        CHECK(frames <= 1e-4);
      }
    }
  }
}

TEST_CASE("LTX image errors name the image" * doctest::timeout(300)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  auto gone = i2v_job(*family, *ref, "i2v", 1);
  gone->spec.image = "/nonexistent/vgen-ltx.png";
  CHECK_THROWS_WITH_AS(family->prepare("cpu", {gone.get()}), doctest::Contains("image"), Error);
  auto wrong = i2v_job(*family, *ref, "i2v", 1, at::zeros({3, 16, 16}));
  CHECK_THROWS_WITH_AS(family->prepare("cpu", {wrong.get()}), doctest::Contains("image"), Error);
  CHECK_NOTHROW(family->warm_up("cpu"));  // the VAE encoder too
}

// Issue 20: a job joining a running group mid-denoise (the real Batcher and step loop) ends as
// it would alone, and so does the job it joined (another prompt, seed, guidance and fps).
TEST_CASE("an LTX job joining a running group at step 2 ends within 1e-4 of its solo run" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  auto other = case_json(ref->info["cases"]["cfg"], 301);
  other["prompt"] = "a blue square moving up";
  other["guidance"] = 3.0;
  other["fps"] = 25.0;
  const boost::json::object specs[] = {case_json(ref->info["cases"]["cfg"], 300), other};
  auto make = [&](int i) { return family->create_job(family->validate(specs[i])); };
  test::check_joined_equals_solo(family, make, 2, "ltx");
}
