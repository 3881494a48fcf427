// Fault injection for resilience tests and drills (off by default): per stage, a failure rate
// (transient: retried with backoff; permanent: fails only that job), added latency, and a
// simulated device out-of-memory for a batched model call (a rate, or every call above a batch size).
//
// Decisions are deterministic for a given seed: whether attempt n of stage s of job j fails is
// a hash of (seed, j, s, n), never of thread timing, so a test with a fixed seed sees the same
// faults on a loaded machine as on an idle one.
// Configured from JSON ({"seed", "stages": {name: {transient_rate, permanent_rate, latency_ms}},
// "oom_rate", "oom_above_batch", "crash": {"stage", "prompt"}}), e.g. the "faults" key of a
// config file or $VGEN_FAULTS. "crash" is a drill for poison-job quarantine: a job whose prompt
// contains `prompt` kills the whole process (SIGKILL, no cleanup) when it enters `stage`
// (or, for the stage name "checkpoint", right after its first durable step checkpoint; for
// "webhook", right after its end and its webhook events are durable, before any is sent).
// "hold": {"stage", "prompt"} (or a list of them) keeps a job whose prompt contains `prompt`
// in `stage` after the stage's work is done, until the job is cancelled: a job that is
// deterministically still running at a known point, for tests of what a client sees meanwhile.
// Thread-safety: immutable after construction; wrap() and check_oom() may run on any thread.
#pragma once

#include "runtime/pipeline.hpp"

#include <boost/json/object.hpp>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace vgen {

struct StageFaults {
  double transient_rate = 0, permanent_rate = 0;
  std::chrono::milliseconds latency{0};
};

struct FaultPlan {
  std::uint64_t seed = 1;
  std::map<std::string, StageFaults> stages;  // by stage name; "*" applies to every stage
  double oom_rate = 0;                        // batched model calls reporting out-of-memory
  std::size_t oom_above_batch = 0;            // calls with more jobs than this run out of memory (0: never)
  std::string crash_stage, crash_prompt;      // kill the process when a matching job enters the stage
  std::vector<std::pair<std::string, std::string>> holds;  // (stage, prompt): held there until cancelled
  bool enabled() const;
};

// Error(invalid_argument) naming the key (prefixed with `origin`) for unknown keys or rates
// outside [0, 1].
FaultPlan parse_fault_plan(const boost::json::object& json, const std::string& origin);

class FaultInjector {
 public:
  explicit FaultInjector(FaultPlan plan) : plan_(std::move(plan)) {}
  const FaultPlan& plan() const noexcept { return plan_; }
  // The stage with faults injected before its function runs (unchanged if none apply).
  StageSpec wrap(StageSpec stage) const;
  // Throws Error(out_of_memory) if the plan says this batched model call (over `jobs` jobs, for the
  // job ids given) runs out of memory on `device`.
  void check_oom(std::size_t jobs, const std::string& device, const std::string& first_job, int attempt) const;
  // The crash drill: SIGKILL if the plan's crash point is `point` (a stage name, or
  // "checkpoint": right after a job's step checkpoint is durable) and the spec's prompt
  // contains the plan's text.
  void crash_if(std::string_view point, const boost::json::value& spec) const;
  // Whether the plan holds a job with this spec at the end of `stage` (until it is cancelled).
  bool holds(std::string_view stage, const boost::json::value& spec) const;
  // The uniform draw in [0, 1) for (job, what, attempt).
  double draw(const std::string& job, const std::string& what, int attempt) const;

 private:
  FaultPlan plan_;
};

}  // namespace vgen
