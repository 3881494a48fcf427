#include "stages/exec/step_cache.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include <vector>

#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;

namespace {

// A toy denoising run: x_{i+1} = x_i + dt * v(x_i), v = -x * gain + t, with each step's
// decision taken by `cache`. Returns the steps that called the "model".
std::vector<int> run(StepCache& cache, int steps, at::Tensor x, double gain = 0.5, at::Tensor* out = nullptr) {
  std::vector<int> called;
  for (int i = 0; i < steps; ++i) {
    const double t = 1.0 - static_cast<double>(i) / steps;
    at::Tensor v;
    if (cache.needs_call(i, steps, x)) {
      v = -x * gain + t;
      cache.record(x, v);
      called.push_back(i);
    } else {
      v = cache.reuse(x);
    }
    x = x + v / steps;
  }
  if (out) *out = x;
  return called;
}

at::Tensor start() { return at::linspace(-1.0, 1.0, 32, at::kFloat).reshape({1, 2, 4, 4}); }

}  // namespace

TEST_CASE("threshold 0 is off: every step calls the model") {
  StepCache cache;
  CHECK_FALSE(cache.enabled());
  CHECK(run(cache, 20, start()).size() == 20);
  CHECK(cache.skipped() == 0);
  CHECK(cache.calls() == 20);
}

TEST_CASE("the warm-up steps and the last step always call the model") {
  StepCache cache(1e9);  // would skip everything it may
  const auto called = run(cache, 20, start());
  REQUIRE(StepCache::warmup_steps(20) == 2);
  CHECK(called == std::vector<int>{0, 1, 19});
  CHECK(cache.skipped() == 17);
  CHECK(StepCache::warmup_steps(50) == 5);
  CHECK(StepCache::warmup_steps(3) == 2);
}

TEST_CASE("a small threshold skips fewer steps than a large one, and the result stays close") {
  at::Tensor exact, coarse, fine;
  StepCache off;
  run(off, 40, start(), 0.5, &exact);
  StepCache small(0.08), large(0.4);
  const auto called_small = run(small, 40, start(), 0.5, &fine);
  const auto called_large = run(large, 40, start(), 0.5, &coarse);
  CHECK(small.skipped() > 0);
  CHECK(large.skipped() > small.skipped());
  CHECK(called_small.size() + small.skipped() == 40);
  const double err_small = (fine - exact).abs().max().item<double>();
  const double err_large = (coarse - exact).abs().max().item<double>();
  CHECK(err_small < 0.05);
  CHECK(err_small <= err_large);
  MESSAGE("skipped ", small.skipped(), " and ", large.skipped(), " of 40; max error ", err_small, " and ", err_large);
}

TEST_CASE("a reused step is the input plus the change of the last call, in the prediction's dtype") {
  StepCache cache(1e9);
  auto x0 = at::ones({1, 4}, at::kFloat);
  auto v0 = (x0 * 3).to(at::kDouble);
  REQUIRE(cache.needs_call(0, 10, x0));
  cache.record(x0, v0);
  auto x1 = x0 * 2;
  REQUIRE(cache.needs_call(1, 10, x1));
  cache.record(x1, (x1 * 3).to(at::kDouble));  // change 2 * x1 = 4
  auto x2 = x0 * 2.5;
  REQUIRE_FALSE(cache.needs_call(2, 10, x2));
  const auto v2 = cache.reuse(x2);
  CHECK((v2.scalar_type() == at::kDouble));
  CHECK(at::allclose(v2, at::full({1, 4}, 6.5, at::kDouble)));
}

TEST_CASE("a copy goes on exactly as the original (state moves with the job)") {
  StepCache a(0.1);
  auto x = start();
  for (int i = 0; i < 6; ++i) {
    if (a.needs_call(i, 20, x)) a.record(x, -x * 0.5);
    else a.reuse(x);
    x = x * 0.9;
  }
  StepCache b = a;
  for (int i = 6; i < 20; ++i) {
    const bool ca = a.needs_call(i, 20, x), cb = b.needs_call(i, 20, x);
    CHECK(ca == cb);
    if (ca) {
      a.record(x, -x * 0.5);
      b.record(x, -x * 0.5);
    } else {
      CHECK(at::equal(a.reuse(x), b.reuse(x)));
    }
    x = x * 0.9;
  }
  CHECK(a.skipped() == b.skipped());
}
