// Admission and preemption latency on a Wan package, through a Pipeline of the preprocess and
// denoise stages over the Batcher (as ModelSet runs them), one CPU device:
//  join     max_batch 4: job B (same shape) is submitted while job A's group is at step STEPS/3;
//           the time from B's submission to the start of its first step (its preprocess
//           included), in A's step times, against the time A's group still had to run.
//  preempt  max_batch 1: B (priority 10) is submitted while A (priority 0) runs; the time to
//           B's first step with preemption (the batcher sees the denoise queue) and without.
//
//   bench_admission PACKAGE_DIR [STEPS] [REPEATS]
//
// Prints one JSON line per run and a summary table. Numbers are wall-clock on whatever machine
// runs it; report the machine with them.
#include "runtime/pipeline.hpp"
#include "stages/exec/batcher.hpp"
#include "stages/exec/denoise_news.hpp"
#include "stages/model/model_package.hpp"
#include "stages/families/wan/wan_family.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <string>
#include <vector>

using namespace vgen;
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Timeline {
  std::mutex m;
  std::vector<Clock::time_point> a_steps;  // A's step ends
  std::optional<Clock::time_point> submitted, a_end;
};

struct Result {
  double step_s = 0, latency_s = 0, rest_of_group_s = 0;
};

// One run: A, and B submitted at A's step `at`; B's priority and whether the batcher sees the queue.
Result run(const std::shared_ptr<Family>& family, std::size_t max_batch, int steps, int at, int b_priority, bool probe) {
  Executor executor{{.io_threads = 1}};
  const auto specs = parse_device_list("cpu");
  DevicePool devices(specs);
  add_device_pools(executor, specs);
  Timeline tl;
  std::unique_ptr<Pipeline> pipeline;
  std::atomic<bool> sent{false};
  BatcherOptions bo{.batching = {.max_batch = max_batch, .wait = std::chrono::milliseconds(0)}, .executor = &executor, .devices = &devices};
  auto batcher = std::make_shared<Batcher>(std::move(bo));
  auto prepare = [batcher, family, &tl, &pipeline, &sent, at, steps, b_priority](Job& job) -> asio::awaitable<void> {
    auto work = family->create_job(family->validate(job.spec()));
    job.payload = work;
    if (job.id() == "A") {
      work->on_step = [&tl, &pipeline, &sent, at, steps, b_priority](int i, const at::Tensor&) {
        std::lock_guard lock(tl.m);
        tl.a_steps.push_back(Clock::now());
        if (i + 1 == steps) tl.a_end = Clock::now();
        if (i + 1 == at && !sent.exchange(true)) {
          tl.submitted = Clock::now();
          boost::json::object b{{"prompt", "a blue square rotating slowly"}, {"seed", 2}, {"steps", steps}, {"priority", b_priority}, {"step_cache", 0}};
          pipeline->try_submit(b, "B");
        }
      };
    } else {
      work->on_step = [&tl](int, const at::Tensor&) {};
    }
    co_await batcher->join(family, job, BatchKind::preprocess);
  };
  auto denoise = [batcher, family](Job& job) { return batcher->join(family, job, BatchKind::denoise); };
  std::vector<StageSpec> stages{{"preprocess", max_batch, 8, prepare},
                                {"denoise", max_batch, 8, denoise}};
  PipelineOptions po;
  // When B's first step ended (its first plain progress event).
  std::optional<Clock::time_point> b_first_step_end;
  po.on_event = [&](const JobEvent& e) {
    if (e.job_id == "B" && e.status() == "denoise" && e.step == 1 && scheduling_event(e).empty()) {
      std::lock_guard lock(tl.m);
      if (!b_first_step_end) b_first_step_end = Clock::now();
    }
  };
  pipeline = std::make_unique<Pipeline>(executor.get_executor(), std::move(stages), std::move(po));
  if (probe) batcher->set_waiting_probe([p = pipeline.get()](int priority) { return p->waiting_above("denoise", priority); });
  pipeline->start();
  // step_cache 0: step-cached jobs are never preempted, and the bundled package suggests a threshold.
  pipeline->try_submit(boost::json::object{{"prompt", "a red circle moving left"}, {"seed", 1}, {"steps", steps}, {"step_cache", 0}}, "A");
  while (!sent) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  executor.run_sync(pipeline->drain());
  executor.stop();
  Result r;
  std::vector<double> gaps;
  for (std::size_t i = 1; i < tl.a_steps.size() && i < static_cast<std::size_t>(at); ++i)
    gaps.push_back(seconds(tl.a_steps[i] - tl.a_steps[i - 1]));
  std::sort(gaps.begin(), gaps.end());
  r.step_s = gaps.empty() ? 0 : gaps[gaps.size() / 2];
  // The start of B's first step: the end of its first step less one step time (B's row adds
  // little to a group's call on this model; the table says so).
  r.latency_s = b_first_step_end ? seconds(*b_first_step_end - *tl.submitted) - r.step_s : -1;
  r.rest_of_group_s = tl.a_end ? seconds(*tl.a_end - *tl.submitted) : -1;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_admission PACKAGE_DIR [STEPS] [REPEATS]\n");
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 30;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  std::shared_ptr<Family> family = make_wan_family(load_model_package(argv[1]), FamilyOptions{});
  const int at = std::max(2, steps / 3);
  run(family, 1, 3, 2, 0, false);  // warm-up: the modules' first calls are slow
  struct Case {
    const char* name;
    std::size_t max_batch;
    int priority;
    bool probe;
  };
  const Case cases[] = {{"join", 4, 0, true}, {"preempt", 1, 10, true}, {"no-preempt", 1, 10, false}};
  std::printf("| case | step s (median) | B waited s (median) | in step times | A's group still had s |\n|---|---|---|---|---|\n");
  std::vector<std::string> lines;
  for (const auto& c : cases) {
    std::vector<Result> rs;
    for (int i = 0; i < repeats; ++i) {
      rs.push_back(run(family, c.max_batch, steps, at, c.priority, c.probe));
      const auto& r = rs.back();
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "{\"case\": \"%s\", \"steps\": %d, \"at\": %d, \"step_s\": %.4f, \"latency_s\": %.4f, \"rest_of_group_s\": %.4f}",
                    c.name, steps, at, r.step_s, r.latency_s, r.rest_of_group_s);
      lines.push_back(buf);
    }
    std::sort(rs.begin(), rs.end(), [](const Result& a, const Result& b) { return a.latency_s < b.latency_s; });
    const auto& m = rs[rs.size() / 2];
    std::printf("| %s | %.4f | %.4f | %.2f | %.3f |\n", c.name, m.step_s, m.latency_s, m.step_s > 0 ? m.latency_s / m.step_s : 0,
                m.rest_of_group_s);
  }
  std::printf("\n");
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  return 0;
}
