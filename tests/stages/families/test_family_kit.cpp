#include "stages/families/family_kit.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include "runtime/errors.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's are doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;

namespace {

std::vector<std::shared_ptr<FamilyJob>> jobs_with(std::initializer_list<double> guidance) {
  std::vector<std::shared_ptr<FamilyJob>> out;
  for (double g : guidance) {
    out.push_back(std::make_shared<FamilyJob>());
    out.back()->spec.guidance = g;
  }
  return out;
}

std::vector<FamilyJob*> raw(const std::vector<std::shared_ptr<FamilyJob>>& jobs) {
  std::vector<FamilyJob*> out;
  for (const auto& j : jobs) out.push_back(j.get());
  return out;
}

}  // namespace

TEST_CASE("guide_rows: each job's uncond + g (cond - uncond), with its own scale") {
  const auto jobs = jobs_with({2.0, 0.5, 1.0});
  const auto pred = at::randn({6, 2, 3});
  const auto out = guide_rows(pred, raw(jobs));
  REQUIRE(out.sizes() == at::IntArrayRef({3, 2, 3}));
  const double g[] = {2.0, 0.5, 1.0};
  for (int j = 0; j < 3; ++j) {
    const auto u = pred[2 * j], c = pred[2 * j + 1];
    CHECK(at::equal(out[j], u + g[j] * (c - u)));  // the same operations: bit-identical
  }
  CHECK(at::allclose(out[2], pred[5]));  // g = 1: the conditional prediction
  CHECK_THROWS_AS(guide_rows(at::zeros({5, 2}), raw(jobs)), Error);
}

TEST_CASE("set_frames: [-1, 1] video rows become [F, H, W, 3] frames in [0, 1], clamped") {
  const auto jobs = jobs_with({1.0, 1.0});
  auto video = at::zeros({2, 3, 4, 5, 6});
  video[0][1][2][3][4] = 1.0;
  video[1][0][0][0][0] = -3.0;  // clamped to 0
  video[1][2][3][4][5] = 0.5;
  set_frames(video, raw(jobs));
  REQUIRE(jobs[0]->frames.sizes() == at::IntArrayRef({4, 5, 6, 3}));
  CHECK(jobs[0]->frames[2][3][4][1].item<float>() == 1.0f);
  CHECK(jobs[0]->frames[0][0][0][0].item<float>() == 0.5f);
  CHECK(jobs[1]->frames[0][0][0][0].item<float>() == 0.0f);
  CHECK(jobs[1]->frames[3][4][5][2].item<float>() == 0.75f);
  CHECK(jobs[1]->frames.is_contiguous());
  CHECK_THROWS_AS(set_frames(video, {jobs[0].get()}), Error);
}

TEST_CASE("clip_frames: one clip's frames on the host, channels last, clamped, in the clip's dtype") {
  auto clip = at::linspace(-1.5, 1.5, 3 * 2 * 4 * 5).reshape({3, 2, 4, 5});
  const auto frames = clip_frames(clip);
  CHECK((frames.scalar_type() == at::kFloat));
  CHECK(frames.device().is_cpu());
  CHECK(frames.is_contiguous());
  REQUIRE(frames.sizes() == at::IntArrayRef({2, 4, 5, 3}));
  const auto want = (clip / 2 + 0.5).clamp(0, 1).permute({1, 2, 3, 0});
  CHECK(at::equal(frames, want.contiguous()));
  CHECK(frames.min().item<float>() == 0.0f);
  CHECK(frames.max().item<float>() == 1.0f);
}
