// Step cache (stages/exec/step_cache.hpp) on a Wan package: for each threshold, the denoise time
// against the uncached render of the same jobs and the PSNR of the decoded frames against it.
//
//   bench_step_cache PACKAGE_DIR [STEPS] [THRESHOLD ...]
//
// Each job runs alone through the Batcher (max_batch 1) on one CPU device; the modules are
// warmed up first. Prints one JSON line per (prompt, threshold) and a summary table.
#include "stages/exec/batcher.hpp"
#include "stages/model/model_package.hpp"
#include "stages/families/wan/wan_family.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

using namespace vgen;

namespace {

struct Run {
  double denoise_s = 0;
  at::Tensor frames;
};

Run render(Family& family, Batcher& batcher, Executor& executor, const std::string& prompt, std::uint64_t seed, int steps,
           double threshold) {
  boost::json::object spec{{"prompt", prompt}, {"seed", seed}, {"steps", steps}};
  spec["step_cache"] = threshold;  // 0 explicitly: uncached even where the package suggests a threshold
  auto job = std::make_shared<Job>("bench", spec);
  auto work = family.create_job(family.validate(spec));
  job->payload = work;
  family.prepare("cpu:0", {work.get()});
  auto shared = std::shared_ptr<Family>(&family, [](Family*) {});
  const auto t0 = std::chrono::steady_clock::now();
  executor.run_sync(batcher.join(shared, *job, BatchKind::denoise));
  Run r;
  r.denoise_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  family.decode("cpu:0", {work.get()});
  r.frames = work->frames.clone();
  return r;
}

double psnr(const at::Tensor& a, const at::Tensor& b) {
  const double mse = (a - b).pow(2).mean().item<double>();
  return mse <= 0 ? INFINITY : 10.0 * std::log10(1.0 / mse);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_step_cache PACKAGE_DIR [STEPS] [THRESHOLD ...]\n");
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 30;
  std::vector<double> thresholds;
  for (int i = 3; i < argc; ++i) thresholds.push_back(std::atof(argv[i]));
  if (thresholds.empty()) thresholds = {0.05, 0.1, 0.2, 0.3};
  auto family = make_wan_family(load_model_package(argv[1]), FamilyOptions{});
  Executor executor{{.io_threads = 1}};
  const auto specs = parse_device_list("cpu");
  DevicePool pool(specs);
  add_device_pools(executor, specs);
  Batcher batcher(BatcherOptions{.batching = {.max_batch = 1, .wait = std::chrono::milliseconds(0)}, .executor = &executor, .devices = &pool});
  const std::vector<std::string> prompts = {"a red circle moving left", "a blue square rotating slowly",
                                            "a green triangle bouncing"};
  render(*family, batcher, executor, prompts[0], 1, 3, 0);  // warm-up: the modules' first calls are slow
  std::map<double, std::vector<double>> speedups, psnrs;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const auto base = render(*family, batcher, executor, prompts[p], 100 + p, steps, 0);
    for (double t : thresholds) {
      const auto r = render(*family, batcher, executor, prompts[p], 100 + p, steps, t);
      const double s = base.denoise_s / r.denoise_s, q = psnr(r.frames, base.frames);
      speedups[t].push_back(s);
      psnrs[t].push_back(q);
      std::printf("{\"prompt\": %zu, \"steps\": %d, \"threshold\": %g, \"uncached_s\": %.3f, \"cached_s\": %.3f, "
                  "\"speedup\": %.3f, \"psnr_db\": %.2f}\n",
                  p, steps, t, base.denoise_s, r.denoise_s, s, q);
    }
  }
  std::printf("\n| threshold | denoise speed-up (mean) | PSNR dB (min / mean) |\n|---|---|---|\n");
  for (double t : thresholds) {
    double s = 0, q = 0, qmin = INFINITY;
    for (double x : speedups[t]) s += x;
    for (double x : psnrs[t]) q += x, qmin = std::min(qmin, x);
    std::printf("| %g | %.2fx | %.1f / %.1f |\n", t, s / speedups[t].size(), qmin, q / psnrs[t].size());
  }
  executor.stop();
  return 0;
}
