#include "stages/families/wan/wan_family.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <array>
#include <fstream>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>

#include <boost/asio/steady_timer.hpp>
#include <boost/json/parse.hpp>
#include <boost/asio/this_coro.hpp>

#include "runtime/errors.hpp"
#include "stages/exec/tiled_decode.hpp"
#include "stages/families/wan/text_context.hpp"
#include "stages/exec/model_set.hpp"
#include "stages/model/attention_uses.hpp"
#include "stages/model/component_backends.hpp"
#include "tests/support/family_group.hpp"
#include "tests/support/python_reference.hpp"
#include "tests/stages/families/wan/wan_stage_runs.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace vgen::wan_test;  // the tiny package's runs and checks (wan_stage_runs.hpp)

TEST_CASE("vgen's Wan stages reproduce diffusers' WanPipeline (UniPC and FlowMatchEuler)" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const OutDir out;
  const auto seed = ref->info["seed"].get<std::uint64_t>();
  Capture cap;
  std::shared_ptr<ModelSet> runtime;
  auto jobs = run_jobs(ref->info["package"].get<std::string>(), "cpu",
                       {case_json(ref->info["case"], seed, ""), case_json(ref->info["case"], seed, "FlowMatchEulerDiscreteScheduler")},
                       cap, out.path, &runtime);
  REQUIRE(jobs.size() == 2);
  for (auto& j : jobs) REQUIRE_MESSAGE(j->state() == JobState::done, j->snapshot().error);

  // Text embeddings: [cond; uncond] as one batch. The exporter found UMT5 padding-invariant,
  // so these come from an encoder run over the longest prompt only; each text keeps its own
  // rows (zero after them), where diffusers zero-pads all to 512 positions.
  CHECK(read_wan_config(runtime->package()).text_padding_invariant);
  CHECK(read_wan_config(runtime->package()).transformer_compact_context);  // so the denoise above used forward_compact
  const auto& e = cap.embeds[jobs[0]->id()];
  const auto& lengths = cap.embed_lengths[jobs[0]->id()];
  REQUIRE(lengths.size() == 2);
  CHECK(e.size(1) == std::max(lengths[0], lengths[1]));
  CHECK(e.size(1) < runtime->package().max_length);
  const auto full = runtime->package().max_length;
  CHECK(max_diff(pad_rows(e, full)[0].unsqueeze(0), ref->get("embeds_cond")) <= 1e-5);
  CHECK(max_diff(pad_rows(e, full)[1].unsqueeze(0), ref->get("embeds_uncond")) <= 1e-5);

  for (auto [job, name] : {std::pair{jobs[0], std::string("unipc")}, std::pair{jobs[1], std::string("euler")}}) {
    check_against_reference(*ref, cap, *job, name);
    CHECK(fs::is_regular_file(runtime->result(*job).output));
  }

  // The exported transformer's attention is PyTorch's fused attention, each call served by a
  // kernel (issue 30 item 2): a self- and a cross-attention per block.
  const auto transformer = runtime->package().component("transformer").file;
  bool seen = false;
  for (const auto& u : attention_uses()) {
    if (u.file != transformer || u.method != "forward_compact") continue;
    seen = true;
    int kernels = 0;
    for (const auto& [_, calls] : u.kernels) kernels += calls;
    CHECK(u.sdpa_calls > 0);
    CHECK(u.sdpa_calls % 2 == 0);
    CHECK(kernels == u.sdpa_calls);
  }
  CHECK(seen);
}

TEST_CASE("a bfloat16 package follows diffusers' bfloat16 WanPipeline" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const OutDir out;
  Capture cap;
  auto jobs = run_jobs(ref->info["package_bf16"].get<std::string>(), "cpu",
                       {case_json(ref->info["case"], ref->info["seed"].get<std::uint64_t>(), "")}, cap, out.path);
  REQUIRE_MESSAGE(jobs[0]->state() == JobState::done, jobs[0]->snapshot().error);
  check_against_reference(*ref, cap, *jobs[0], "bf16");
}

TEST_CASE("two CPU replicas both work on a multi-job run; identical prompts are encoded once" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const OutDir out;
  std::vector<boost::json::object> specs;
  for (int i = 0; i < 6; ++i) specs.push_back(case_json(ref->info["case"], 100 + i, ""));
  Capture cap;
  std::shared_ptr<ModelSet> runtime;
  auto jobs = run_jobs(ref->info["package"].get<std::string>(), "cpu,cpu", specs, cap, out.path, &runtime);
  std::set<std::string> used;
  for (auto& j : jobs) {
    REQUIRE_MESSAGE(j->state() == JobState::done, j->snapshot().error);
    used.insert(cap.devices[j->id()].begin(), cap.devices[j->id()].end());
  }
  const std::set<std::string> both{"cpu:0", "cpu:1"};
  CHECK(used == both);
  // Same prompt and negative prompt in every job: encoded once per device at most.
  const auto stats = runtime->text_cache_stats();
  CHECK(stats.misses <= 4);
  CHECK(stats.hits >= 8);
  // A job's result does not depend on its neighbours: same seed, same latents.
  auto again = run_jobs(ref->info["package"].get<std::string>(), "cpu", {specs[3]}, cap, out.path);
  CHECK(max_diff(cap.steps[again[0]->id()].back(), cap.steps[jobs[3]->id()].back()) == 0.0);
}

TEST_CASE("cross-job batching (text encoder, denoiser, VAE): each job's result equals its result alone; a cancelled job leaves the batch" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const OutDir out;
  const auto pkg = ref->info["package"].get<std::string>();
  std::vector<boost::json::object> specs;
  const char* prompts[] = {"a red circle moving left", "a blue square moving up", "a green triangle", "a cat"};
  for (int i = 0; i < 4; ++i) {
    auto s = case_json(ref->info["case"], 200 + i, "");
    s["prompt"] = prompts[i];
    s["guidance"] = 2.0 + i;  // each job keeps its own guidance scale inside the batch
    s["steps"] = 6;
    specs.push_back(s);
  }
  Capture batched;
  std::shared_ptr<ModelSet> runtime;
  auto jobs = run_jobs(pkg, "cpu", specs, batched, out.path, &runtime, 4);
  const auto groups = runtime->group_sizes("denoise");
  CHECK(groups.size() == 1);
  CHECK(groups.count(4) == 1);  // one transformer batch of four jobs
  const auto decodes = runtime->group_sizes("decode");  // decoded together too (same latent shape)
  std::uint64_t decoded = 0;
  for (const auto& [size, n] : decodes) decoded += size * n;
  CHECK(decoded == 4);
  CHECK(decodes.rbegin()->first >= 2);
  const auto encodes = runtime->group_sizes("preprocess");  // four prompts through one text-encoder call
  CHECK(encodes.size() == 1);
  CHECK(encodes.count(4) == 1);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    REQUIRE_MESSAGE(jobs[i]->state() == JobState::done, jobs[i]->snapshot().error);
    Capture alone;
    auto single = run_jobs(pkg, "cpu", {specs[i]}, alone, out.path);
    CHECK(max_diff(alone.embeds[single[0]->id()], batched.embeds[jobs[i]->id()]) <= 1e-4);
    const auto& a = alone.steps[single[0]->id()];
    const auto& b = batched.steps[jobs[i]->id()];
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k) CHECK(max_diff(a[k], b[k]) <= 1e-4);
    CHECK(max_diff(alone.frames[single[0]->id()], batched.frames[jobs[i]->id()]) <= 1e-4);
  }
  // Cancel the first job while the batch of four is denoising: the other three finish with
  // results within 1e-4, the cancelled one stops.
  Capture again;
  auto rerun = run_jobs(pkg, "cpu", specs, again, out.path, nullptr, 4, "job-1");
  CHECK(rerun[0]->state() == JobState::cancelled);
  for (std::size_t i = 1; i < specs.size(); ++i) {
    REQUIRE_MESSAGE(rerun[i]->state() == JobState::done, rerun[i]->snapshot().error);
    // The batch shrinks to three: the same up to batch numerics.
    CHECK(max_diff(again.steps[rerun[i]->id()].back(), batched.steps[jobs[i]->id()].back()) <= 1e-4);
  }
}

TEST_CASE("the compact text context and the zero-padded 512 rows give the same denoising" * doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const OutDir out;
  const fs::path pkg = ref->info["package"].get<std::string>();
  // Copies of the package with manifest edits.
  auto variant = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    const auto dir = out.path / name;
    fs::copy(pkg, dir);
    nlohmann::json manifest;
    std::ifstream(dir / "manifest.json") >> manifest;
    edit(manifest);
    std::ofstream(dir / "manifest.json") << manifest.dump();
    return dir;
  };
  // forward on all max_length rows: the flag off, or the method not listed.
  const auto full = variant("pkg_full", [](nlohmann::json& m) { m["transformer"]["compact_context"] = false; });
  const auto unlisted = variant("pkg_unlisted", [](nlohmann::json& m) { m["components"]["transformer"]["methods"] = {"forward"}; });
  // compact, with an encoder run on all max_length tokens (not padding-invariant)
  const auto whole_text = variant("pkg_whole_text", [](nlohmann::json& m) { m["text_encoder"]["padding_invariant"] = false; });

  // Two prompts of different lengths in one group: their rows are padded to the longer one.
  std::vector<boost::json::object> specs{case_json(ref->info["case"], 300, ""), case_json(ref->info["case"], 301, "")};
  specs[1]["prompt"] = "a cat";
  Capture compact, padded, unlisted_cap, whole_cap;
  std::shared_ptr<ModelSet> rc, rp, ru, rw;
  auto a = run_jobs(pkg, "cpu", specs, compact, out.path, &rc, 2);
  auto b = run_jobs(full, "cpu", specs, padded, out.path, &rp, 2);
  run_jobs(unlisted, "cpu", specs, unlisted_cap, out.path, &ru, 2);
  auto w = run_jobs(whole_text, "cpu", specs, whole_cap, out.path, &rw, 2);
  CHECK(read_wan_config(rc->package()).transformer_compact_context);
  CHECK_FALSE(read_wan_config(rp->package()).transformer_compact_context);
  CHECK_FALSE(read_wan_config(ru->package()).transformer_compact_context);
  CHECK(read_wan_config(rw->package()).transformer_compact_context);
  CHECK_FALSE(read_wan_config(rw->package()).text_padding_invariant);
  CHECK(rc->group_sizes("denoise").count(2) == 1);
  CHECK_NOTHROW(rw->warm_up("cpu"));  // its text rows come back at the longest prompt, not 512
  for (std::size_t i = 0; i < specs.size(); ++i) {
    REQUIRE_MESSAGE(a[i]->state() == JobState::done, a[i]->snapshot().error);
    REQUIRE_MESSAGE(b[i]->state() == JobState::done, b[i]->snapshot().error);
    REQUIRE_MESSAGE(w[i]->state() == JobState::done, w[i]->snapshot().error);
    const auto& x = compact.steps[a[i]->id()];
    const auto& y = padded.steps[b[i]->id()];
    const auto& z = whole_cap.steps[w[i]->id()];
    REQUIRE(x.size() == y.size());
    REQUIRE(x.size() == z.size());
    for (std::size_t k = 0; k < x.size(); ++k) {
      CHECK(max_diff(x[k], y[k]) <= 1e-5);
      CHECK(max_diff(x[k], z[k]) <= 1e-4);
    }
    CHECK(max_diff(compact.frames[a[i]->id()], padded.frames[b[i]->id()]) <= 1e-5);
    // The pair shares one guidance scale, so the group applied it as one batch: the same as
    // the job alone.
    Capture alone;
    auto single = run_jobs(pkg, "cpu", {specs[i]}, alone, out.path);
    CHECK(max_diff(alone.steps[single[0]->id()].back(), x.back()) <= 1e-4);
  }
}

TEST_CASE("WanConfig: the manifest's Wan flags, false when absent; compact only with the method listed and a masked output") {
  auto config = [](const char* manifest) {
    ModelPackage p;
    p.manifest = boost::json::parse(manifest).as_object();
    return read_wan_config(p);
  };
  const auto none = config("{}");
  CHECK_FALSE(none.text_padding_invariant);
  CHECK_FALSE(none.text_output_masked);
  CHECK_FALSE(none.transformer_compact_context);
  const auto all = config(R"({"text_encoder": {"padding_invariant": true, "output_masked": true},
      "transformer": {"compact_context": true}, "components": {"transformer": {"methods": ["forward", "forward_compact"]}}})");
  CHECK(all.text_padding_invariant);
  CHECK(all.text_output_masked);
  CHECK(all.transformer_compact_context);
  CHECK_FALSE(config(R"({"text_encoder": {"output_masked": true}, "transformer": {"compact_context": true},
      "components": {"transformer": {"methods": ["forward"]}}})").transformer_compact_context);
  CHECK_FALSE(config(R"({"text_encoder": {"output_masked": false}, "transformer": {"compact_context": true},
      "components": {"transformer": {"methods": ["forward_compact"]}}})").transformer_compact_context);
  CHECK_FALSE(config(R"({"text_encoder": {"padding_invariant": "yes"}})").text_padding_invariant);
}

// The tiling itself is checked against diffusers in tests/stages/exec/test_tiled_decode.cpp;
// here: the family tiles when its options or its manifest say so, and only then.
TEST_CASE("decode tiles by FamilyOptions::decode or the manifest's decode section; auto leaves the test sizes whole" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const auto package = load_model_package(ref->info["package"].get<std::string>());
  const auto latents = at::randn({1, package.latent_channels, 3, 4, 6}, at::TensorOptions().dtype(at::kFloat));
  auto frames = [&](const ModelPackage& p, const FamilyOptions& options) {
    WanFamily family(p, options);
    auto job = family.create_job(p.defaults);
    job->state.latents = latents;
    family.decode("cpu", {job.get()});
    return job->frames;
  };
  const auto whole = frames(package, {});  // "auto": 4 x 6 latent pixels are far below 480p
  FamilyOptions on;
  on.decode.tiling = "on";
  on.decode.tile_height = on.decode.tile_width = 16;  // 2 x 2 latent pixels every 1: 4 x 6 tiles
  on.decode.stride_height = on.decode.stride_width = 8;
  const auto tiled = frames(package, on);
  REQUIRE(tiled.sizes() == whole.sizes());

  // What the family should produce: the un-normalised latents tiled through decode_unclamped.
  const auto c = package.latent_channels;
  const auto mean = at::tensor(package.latents_mean, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  const auto std = at::tensor(package.latents_std, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto vae = load_module("torchscript", package.component("vae_decoder").file, "cpu", at::kFloat);
  const auto z = latents / (1.0 / std) + mean;
  const auto direct = tiled_decode(z, [&](const at::Tensor& t) { return vae->call("decode_unclamped", {t}); }, 8, on.decode);
  const auto expected = (direct[0] / 2 + 0.5).clamp(0, 1).permute({1, 2, 3, 0});
  CHECK(max_diff(tiled, expected) <= 1e-6);
  const double blend = max_diff(tiled, whole);
  MESSAGE("tiled (16 px tiles every 8) vs whole decode: max |diff| " << blend);
  CHECK(blend > 1e-3);

  // The manifest's section overrides the options; "off" there wins over "on" here.
  auto with_section = [&](const char* section) {
    auto p = package;
    p.manifest["decode"] = boost::json::parse(section);
    return p;
  };
  CHECK(max_diff(frames(with_section(R"({"tiling": "on", "tile": 16, "stride": 8})"), {}), tiled) == 0);
  CHECK(max_diff(frames(with_section(R"({"tiling": "off"})"), on), whole) == 0);
  CHECK_THROWS_WITH_AS(frames(with_section(R"({"tiling": "always"})"), {}), doctest::Contains("decode.tiling"), Error);
  FamilyOptions bad;
  bad.decode.stride_height = 12;
  CHECK_THROWS_WITH_AS(frames(package, bad), doctest::Contains("multiples"), Error);
}

TEST_CASE("a missing or damaged package is reported by name") {
  Executor executor;
  DevicePool pool(parse_device_list("cpu"));
  using Named = std::vector<std::pair<std::string, std::filesystem::path>>;  // not LoadedModels
  CHECK_THROWS_AS(ModelSet(Named{{"m", "/nonexistent/pkg"}}, executor, pool, ModelSetOptions{}), Error);
}

TEST_CASE("two experts (Wan 2.2 A14B): diffusers' WanPipeline with transformer_2, and batched = solo" * doctest::timeout(600)) {
  const char* dir = std::getenv("VGEN_WAN_A14B_PARITY_DIR");
  if (!dir || !*dir || !fs::is_regular_file(fs::path(dir) / "parity.json")) {
    WARN_MESSAGE(false, "VGEN_WAN_A14B_PARITY_DIR not set (no tooling Python): skipped");
    return;
  }
  std::ifstream in(fs::path(dir) / "parity.json");
  Reference ref{nlohmann::json::parse(in), std::nullopt};
  // The case switches expert inside the loop: both are used (else this would test one model).
  std::set<std::string> experts;
  for (const auto& e : ref.info["experts"]) experts.insert(e.get<std::string>());
  REQUIRE(experts.size() == 2);
  const auto seed = ref.info["seed"].get<std::uint64_t>();
  auto other = case_json(ref.info["case"], seed + 1, "");
  other["prompt"] = "a blue square spinning on a white background";
  const OutDir out;
  Capture cap;
  std::shared_ptr<ModelSet> runtime;
  // Both jobs in one denoise group (max_batch 2): one call per step for both, one expert.
  auto jobs = run_jobs(ref.info["package"].get<std::string>(), "cpu", {case_json(ref.info["case"], seed, ""), other}, cap,
                       out.path, &runtime, 2);
  for (auto& j : jobs) REQUIRE_MESSAGE(j->state() == JobState::done, j->snapshot().error);
  check_against_reference(ref, cap, *jobs[0], "a14b");
  Capture solo_cap;
  auto solo = run_jobs(ref.info["package"].get<std::string>(), "cpu", {other}, solo_cap, out.path);
  REQUIRE(solo[0]->state() == JobState::done);
  const auto& batched_steps = cap.steps[jobs[1]->id()];
  const auto& solo_steps = solo_cap.steps[solo[0]->id()];
  REQUIRE(batched_steps.size() == solo_steps.size());
  double worst = 0;
  for (std::size_t i = 0; i < solo_steps.size(); ++i) worst = std::max(worst, max_diff(batched_steps[i], solo_steps[i]));
  const double frames = max_diff(cap.frames[jobs[1]->id()], solo_cap.frames[solo[0]->id()]);
  MESSAGE("a14b: batched vs solo latents " << worst << ", frames " << frames);
  CHECK(worst <= 1e-4);
  CHECK(frames <= 1e-4);
}

// Issue 20: a job joining a running group mid-denoise (the real Batcher and step loop) ends as
// it would alone, and so does the job it joined.
TEST_CASE("a T2V job joining a running group at step 2 (UniPC history per cohort) ends within 1e-4 of its solo run" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  auto other = case_json(ref->info["case"], 77, "");
  other["prompt"] = "a blue square spinning on a white background";
  const boost::json::object specs[] = {case_json(ref->info["case"], ref->info["seed"].get<std::uint64_t>(), ""), other};
  test::check_joined_equals_solo(family, [&](int i) { return fresh_job(*family, specs[i]); }, 2, "wan2.1-t2v");
}

TEST_CASE("two experts (Wan 2.2 A14B): a job joining across the expert switch ends within 1e-4 of its solo run" *
          doctest::timeout(600)) {
  const char* dir = std::getenv("VGEN_WAN_A14B_PARITY_DIR");
  if (!dir || !*dir || !fs::is_regular_file(fs::path(dir) / "parity.json")) {
    WARN_MESSAGE(false, "VGEN_WAN_A14B_PARITY_DIR not set (no tooling Python): skipped");
    return;
  }
  std::ifstream in(fs::path(dir) / "parity.json");
  const auto info = nlohmann::json::parse(in);
  // The first job's first low-noise step: the late job's high-noise steps share its calls.
  int at = 0;
  while (info["experts"][at] == info["experts"][0]) ++at;
  REQUIRE(at > 0);
  register_builtin_families();
  auto family = load_family(info["package"].get<std::string>());
  auto other = case_json(info["case"], 78, "");
  other["prompt"] = "a blue square spinning on a white background";
  const boost::json::object specs[] = {case_json(info["case"], info["seed"].get<std::uint64_t>(), ""), other};
  test::check_joined_equals_solo(family, [&](int i) { return fresh_job(*family, specs[i]); }, at, "wan2.2-a14b-t2v");
}
