// The Wan family with its text encoder, transformer and VAE decoder compiled by AOTInductor (the
// wan_aoti_parity package: the tiny Wan of wan_parity, same weights, plus .pt2 files): parity
// with diffusers, batched as TorchScript, a clip too short for the compiled VAE, and a job
// joining a running group. The TorchScript cases: test_wan_family.cpp.
#include "stages/families/wan/wan_family.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "stages/model/component_backends.hpp"
#include "tests/stages/families/wan/wan_stage_runs.hpp"
#include "tests/support/family_group.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
using namespace vgen::wan_test;
namespace fs = std::filesystem;

namespace {

// wan_aoti_parity's package (tools/reference/wan_aoti_parity.py): wan_parity's tiny Wan, same
// weights, with its transformer also compiled by AOTInductor for the CPU; nullopt (skipped) without it.
std::optional<fs::path> aoti_package_or_skip() {
  const char* dir = std::getenv("VGEN_WAN_AOTI_PARITY_DIR");
  if (!dir || !*dir || !fs::is_regular_file(fs::path(dir) / "parity.json")) {
    WARN_MESSAGE(false, "VGEN_WAN_AOTI_PARITY_DIR not set (no tooling Python): skipped");
    return std::nullopt;
  }
  std::ifstream in(fs::path(dir) / "parity.json");
  return fs::path(nlohmann::json::parse(in)["package"].get<std::string>());
}

}  // namespace

TEST_CASE("an AOTInductor transformer reproduces diffusers' WanPipeline (float32, 1e-4), batched as TorchScript does" *
          doctest::timeout(900)) {
  auto* ref = reference_or_skip();
  const auto pkg = aoti_package_or_skip();
  if (!ref || !pkg) return;
  const OutDir out;
  const auto seed = ref->info["seed"].get<std::uint64_t>();
  clear_component_backends();
  Capture cap;
  std::shared_ptr<ModelSet> runtime;
  auto jobs = run_jobs(*pkg, "cpu", {case_json(ref->info["case"], seed, ""), case_json(ref->info["case"], seed, "FlowMatchEulerDiscreteScheduler")},
                       cap, out.path, &runtime);
  for (auto& j : jobs) REQUIRE_MESSAGE(j->state() == JobState::done, j->snapshot().error);
  CHECK(read_wan_config(runtime->package()).transformer_compact_context);  // forward_compact, compiled too
  // the text encoder, the transformer and the VAE's whole-clip decode (9 frames: 3 latent
  // frames, its compiled range)
  int compiled = 0;
  for (const auto& b : component_backends())
    if (b.component == "text_encoder" || b.component == "transformer" || b.component == "vae_decoder") {
      CAPTURE(b.component);
      CHECK(b.backend == "aoti");
      CHECK(b.refused == "");
      compiled += b.backend == "aoti";
    }
  REQUIRE(compiled == 3);
  check_against_reference(*ref, cap, *jobs[0], "unipc");
  check_against_reference(*ref, cap, *jobs[1], "euler");

  // Four jobs in one transformer batch, each with its own guidance: the same steps as the
  // TorchScript twin's batch (wan_parity's package: the same weights, no .pt2).
  std::vector<boost::json::object> specs;
  const char* prompts[] = {"a red circle moving left", "a blue square moving up", "a green triangle", "a cat"};
  for (int i = 0; i < 4; ++i) {
    auto s = case_json(ref->info["case"], 200 + i, "");
    s["prompt"] = prompts[i];
    s["guidance"] = 2.0 + i;
    specs.push_back(s);
  }
  Capture aoti, script;
  std::shared_ptr<ModelSet> ra, rs;
  auto a = run_jobs(*pkg, "cpu", specs, aoti, out.path, &ra, 4);
  auto b = run_jobs(ref->info["package"].get<std::string>(), "cpu", specs, script, out.path, &rs, 4);
  CHECK(ra->group_sizes("denoise").count(4) == 1);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    REQUIRE_MESSAGE(a[i]->state() == JobState::done, a[i]->snapshot().error);
    REQUIRE_MESSAGE(b[i]->state() == JobState::done, b[i]->snapshot().error);
    const auto& x = aoti.steps[a[i]->id()];
    const auto& y = script.steps[b[i]->id()];
    REQUIRE(x.size() == y.size());
    for (std::size_t k = 0; k < x.size(); ++k) CHECK(max_diff(x[k], y[k]) <= 1e-4);
    const double d = max_diff(aoti.frames[a[i]->id()], script.frames[b[i]->id()]);
    MESSAGE("batched job " << i << ": max |aoti - torchscript| over frames = " << d);
    CHECK(d <= 1e-4);
  }

  // A clip of 5 frames (2 latent frames) is outside the compiled VAE's range (3 latent frames
  // and more, tools/vgen_export/wan_vae_aoti.py): the TorchScript decoder serves it, same frames.
  auto short_clip = case_json(ref->info["case"], 5, "");
  short_clip["frames"] = 5;
  Capture sa, ss;
  auto ja = run_jobs(*pkg, "cpu", {short_clip}, sa, out.path, &ra);
  auto js = run_jobs(ref->info["package"].get<std::string>(), "cpu", {short_clip}, ss, out.path, &rs);
  REQUIRE_MESSAGE(ja[0]->state() == JobState::done, ja[0]->snapshot().error);
  REQUIRE_MESSAGE(js[0]->state() == JobState::done, js[0]->snapshot().error);
  REQUIRE(sa.frames[ja[0]->id()].size(0) == 5);
  CHECK(max_diff(sa.frames[ja[0]->id()], ss.frames[js[0]->id()]) <= 1e-4);
}

TEST_CASE("an AOTInductor transformer: a job joining a running group at step 2 ends within 1e-4 of its solo run" *
          doctest::timeout(600)) {
  auto* ref = reference_or_skip();
  const auto pkg = aoti_package_or_skip();
  if (!ref || !pkg) return;
  register_builtin_families();
  auto family = load_family(*pkg);
  auto other = case_json(ref->info["case"], 77, "");
  other["prompt"] = "a blue square spinning on a white background";
  const boost::json::object specs[] = {case_json(ref->info["case"], ref->info["seed"].get<std::uint64_t>(), ""), other};
  test::check_joined_equals_solo(family, [&](int i) { return fresh_job(*family, specs[i]); }, 2, "wan2.1-t2v (aoti)");
}
