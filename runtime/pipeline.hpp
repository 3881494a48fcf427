// Pipeline: stages connected by bounded channels, each stage with N concurrent workers.
//
//   submit -> [queue 0] -> stage 0 workers -> [queue 1] -> stage 1 workers -> ... -> finish
//
// A stage is a StageSpec: a name (the job's status while it runs there), a worker count, the
// capacity of its input queue, an optional retry policy and a function `awaitable<void>(Job&)`.
// The pipeline describes and runs the flow on the executor it is given; it owns no threads
// (stage functions offload compute to WorkerPools themselves).
// Hooks let the embedder act around the stages without wrapping them:
//  - PipelineOptions::before_first_stage runs for each job, with its own queue and workers,
//    before the first stage (the job stays queued meanwhile); it may finish the job early as
//    done (e.g. served from a cache), and then no stage sees it.
//  - StageSpec::before runs each time a job enters that stage, once, before its retries (e.g.
//    a claim in a job store that a retry must not repeat).
//
// Guarantees
//  - Every accepted job ends exactly once: done, failed or cancelled. A stage exception fails
//    only that job (failure isolation); other jobs are unaffected.
//  - Order: every queue serves the job of highest Job::priority() first, the oldest (by
//    submission) first within a level, with aging (PipelineOptions::aging per level; see
//    runtime/priority_channel.hpp), so a job waits behind newer ones of at most a bounded lead.
//  - Requeue: a stage that calls Job::request_requeue() (e.g. for a job that gave way to a
//    higher-priority one) puts the job back into its own input queue, with its original ticket,
//    instead of passing it on (its state is `queued` again until a worker takes it, so a cancel
//    ends it at once); the worker then takes the best job waiting there.
//  - Optional stages: a job skips every stage whose StageSpec::applies says no (it goes from
//    the stage before into the next one that applies); end of stream still flows through them.
//  - Backpressure: a full queue suspends the submitter (submit) or refuses it (try_submit ->
//    Error(overloaded)), and a full next queue suspends the upstream worker, so memory is
//    bounded by the queue capacities plus the workers.
//  - Cancellation: cancel(id) marks the job; a queued job is dropped when dequeued, a running
//    stage is interrupted at its next await (its worker is the job's Job::CancelTarget and
//    emits a terminal cancellation into the stage's awaits, retry back-off included) or at
//    Job::throw_if_cancelled() between steps. Deadlines cancel with deadline_exceeded.
//  - drain(): stops intake, lets every accepted job run to its end, then the workers exit
//    stage by stage (the end of stream flows down the queues). shutdown(): the same, but
//    cancels every unfinished job first. Neither loses a job.
// Thread-safety: all public members may be called from any thread.
// Lifetime: keep the Pipeline alive until drain() or shutdown() has completed.
#pragma once

#include "runtime/priority_channel.hpp"
#include "runtime/event.hpp"
#include "runtime/job.hpp"
#include "runtime/metrics.hpp"
#include "runtime/retry.hpp"
#include "runtime/semaphore.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace vgen {

class Tracer;  // runtime/trace.hpp

using StageFn = std::function<boost::asio::awaitable<void>(Job&)>;

struct StageSpec {
  std::string name;  // unique; the job's status while it runs here, and the metrics' "stage" label
  std::size_t workers = 1;
  std::size_t queue_capacity = 16;  // capacity of this stage's input queue
  StageFn fn;
  std::optional<RetryPolicy> retry;  // none: a failure fails the job at once
  std::shared_ptr<AsyncSemaphore> limiter;  // optional extra limit shared with other stages
  // Optional: runs once each time a job enters the stage, after `limiter`, before `fn` and its
  // retries; an exception fails the job as `fn`'s would (without a retry).
  StageFn before;
  // Optional: whether a job that finished the stage before this one goes through this one. A
  // job it says no to passes straight into the next stage that applies (or ends done), never
  // entering this stage's queue: an optional stage costs the jobs that skip it nothing. Called
  // on the previous stage's worker; must be cheap and not throw. Ignored for the first stage.
  std::function<bool(const Job&)> applies;
};

// What a before_first_stage hook decided for a job.
enum class HookOutcome { go_on, done };
using HookFn = std::function<boost::asio::awaitable<HookOutcome>(Job&)>;

// A hook that runs for each job before its first stage, as a pseudo-stage: its own input queue
// (submissions wait for room there), workers, queue-depth gauge, time and trace span under
// `name`, but the job keeps its `queued` state (a cancel ends it at once). HookOutcome::done
// ends the job as done without running any stage; an exception fails it.
struct PipelineHook {
  std::string name;
  std::size_t workers = 1;
  std::size_t queue_capacity = 16;
  HookFn fn;
};

struct PipelineOptions {
  MetricsRegistry* metrics = nullptr;
  JobEventHandler on_event;                          // every job's events (cheap, thread-safe)
  // Called after a job's end is counted (counts().in_flight already lower; a terminal event
  // reaches on_event before that), outside the pipeline's lock, on the thread that ended it.
  // Cheap, thread-safe, must not throw.
  std::function<void()> after_job_end;
  std::optional<std::chrono::milliseconds> default_deadline;  // per job, from submission
  std::uint64_t retry_seed = 0;                      // 0: random jitter
  // Optional (outlives the pipeline): spans for each job's queue waits and stages on its own
  // track and its stage worker's, retries as instant events (runtime/trace.hpp).
  Tracer* tracer = nullptr;
  // Queue aging: a waiting job gains one priority level per this much waiting (> 0).
  std::chrono::milliseconds aging = kDefaultAging;
  std::optional<PipelineHook> before_first_stage;
};

struct PipelineCounts {
  std::uint64_t submitted = 0, rejected = 0, done = 0, failed = 0, cancelled = 0;
  std::size_t in_flight = 0;
};

class Pipeline {
 public:
  Pipeline(boost::asio::any_io_executor executor, std::vector<StageSpec> stages,
           PipelineOptions options = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Spawns the stage workers. Call once.
  void start();

  // Never waits: throws Error(overloaded) when the first queue is full or intake is closed.
  std::shared_ptr<Job> try_submit(boost::json::value spec, std::string id = {},
                                  std::optional<Job::clock::time_point> deadline = {});
  // Waits for room in the first queue (backpressure); Error(overloaded) once intake closed.
  boost::asio::awaitable<std::shared_ptr<Job>> submit(
      boost::json::value spec, std::string id = {},
      std::optional<Job::clock::time_point> deadline = {});

  bool cancel(const std::string& id, std::string reason = "cancelled by request");
  std::shared_ptr<Job> find(const std::string& id) const;  // unfinished jobs only

  boost::asio::awaitable<void> drain();
  boost::asio::awaitable<void> shutdown();

  PipelineCounts counts() const;
  // The stages, with a before_first_stage hook first (as a StageSpec without fn) when there is one.
  const std::vector<StageSpec>& stages() const noexcept { return stages_; }
  std::size_t queue_depth(std::size_t stage) const { return queues_.at(stage)->size(); }
  // Jobs waiting in the input queue of the stage named `stage` (or offered to it by a worker
  // waiting for room) whose priority is above `priority`; 0 for an unknown stage. Thread-safe.
  std::size_t waiting_above(std::string_view stage, int priority) const;

 private:
  using JobPtr = std::shared_ptr<Job>;
  struct StageMetrics {
    Gauge* depth = nullptr;
    Histogram* seconds = nullptr;
    Counter* retries = nullptr;
  };

  struct WorkerSlot;
  JobPtr make_job(boost::json::value spec, std::string id,
                  std::optional<Job::clock::time_point> deadline);
  void admit(const JobPtr& job);
  void reject(const JobPtr& job, std::string why);
  boost::asio::awaitable<void> run_worker(std::size_t stage, std::shared_ptr<WorkerSlot> slot);
  boost::asio::awaitable<void> process(std::size_t stage, JobPtr job, WorkerSlot& slot);
  // Whether the job ended early (a before_first_stage hook's HookOutcome::done).
  boost::asio::awaitable<bool> run_stage(std::size_t stage, Job& job);
  // The stage after `stage` that `job` goes through (StageSpec::applies); stages_.size(): none.
  std::size_t next_stage(std::size_t stage, const Job& job) const;
  bool is_hook(std::size_t stage) const noexcept { return stage == 0 && hook_fn_ != nullptr; }
  boost::asio::awaitable<void> watch_deadline(JobPtr job);
  void end_job(const JobPtr& job, JobState state, std::exception_ptr error = {});
  void on_worker_exit(std::size_t stage);
  void close_intake();
  void mark_queued(const Job& job);
  void trace_stage(std::size_t stage, const Job& job, const WorkerSlot& slot, std::chrono::steady_clock::time_point t0,
                   const std::exception_ptr& error);

  boost::asio::any_io_executor executor_;
  std::vector<StageSpec> stages_;
  PipelineOptions options_;
  HookFn hook_fn_;  // options_.before_first_stage's, run as stages_[0]
  std::vector<std::unique_ptr<PriorityChannel<JobPtr>>> queues_;
  std::vector<StageMetrics> stage_metrics_;
  std::vector<std::atomic<std::size_t>> live_workers_;
  AsyncEvent all_workers_done_;
  std::atomic<bool> started_{false}, accepting_{true};

  mutable std::mutex mutex_;
  std::map<std::string, JobPtr> active_;
  PipelineCounts counts_;
  std::uint64_t next_id_ = 0;
  std::map<const Job*, std::chrono::steady_clock::time_point> queued_at_;  // tracing only

  Counter* submitted_total_ = nullptr;
  Counter* rejected_total_ = nullptr;
  Gauge* in_flight_ = nullptr;
};

}  // namespace vgen
