// Job: one request moving through the pipeline, and the record of what happened to it.
//
// Lifecycle: queued -> preprocess -> denoise -> decode -> encode -> done | failed | cancelled
// (a pipeline may use any prefix of the stage states). finish() is the only way into a
// terminal state and only its first call wins, so a job ends exactly once.
//
// Ownership: jobs are shared (std::shared_ptr<Job>) between the submitter, the pipeline and
// listeners. `payload` belongs to the stage currently processing the job (one stage at a
// time), so it needs no lock.
// Thread-safety: every other member may be called from any thread.
// Cancellation: request_cancel() records a reason, sets cancel_event() and interrupts the
// job's CancelTarget (the pipeline worker running its stage, which emits a cancellation into
// the stage's awaits); stages see it at their next await or when they call
// throw_if_cancelled() between steps. Compute already running finishes first.
#pragma once

#include "runtime/errors.hpp"
#include "runtime/event.hpp"

#include <boost/json/value.hpp>
#include <any>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace vgen {

enum class JobState { queued, preprocess, denoise, decode, encode, done, failed, cancelled };
std::string_view to_string(JobState s) noexcept;
bool is_terminal(JobState s) noexcept;

// A small image of what a job will look like (stages/preview.hpp makes them while denoising).
// Immutable once made: shared between the job, its events and readers.
struct JobPreview {
  int step = 0, total = 0;   // the denoising step it shows, of total
  int width = 0, height = 0;
  std::string content_type;  // "image/png"
  std::string bytes;         // the encoded image
};

struct JobEvent {
  std::string job_id;
  JobState state = JobState::queued;
  int step = 0;   // progress within the state (e.g. denoising step i of total)
  int total = 0;
  std::string message;  // error text for failed/cancelled; a note for progress (a resume)
  std::shared_ptr<const JobPreview> preview;  // set on the event that announces a new preview only
  // Scheduling news while denoising: "admitted" (joined a running group at `step`), "preempted"
  // (left its group at `step` and went back to the queue), "resumed" (went on from `step` after a
  // preemption or a checkpoint); empty for state changes and plain progress.
  std::string event;
  int skipped = 0;  // denoiser calls the step cache skipped for this job so far
};
using JobEventHandler = std::function<void(const JobEvent&)>;

struct JobSnapshot {
  std::string id;
  JobState state = JobState::queued;
  int step = 0, total = 0;
  std::optional<ErrorKind> error_kind;
  std::string error;
  int attempts = 0;  // stage attempts beyond the first (retries)
  int resumed_from = 0;  // > 0: the denoising step a checkpoint brought it back to
  int priority = 0;
  int preemptions = 0;    // times it left a denoise group for a higher-priority job
  int skipped_steps = 0;  // denoiser calls the step cache skipped
  std::map<std::string, double> stage_seconds;
  double queued_seconds = 0;  // submission -> first stage
  double total_seconds = 0;   // submission -> terminal (or now)
};

class Job : public std::enable_shared_from_this<Job> {
 public:
  using clock = std::chrono::steady_clock;

  Job(std::string id, boost::json::value spec, std::optional<clock::time_point> deadline = {});
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& id() const noexcept { return id_; }
  const boost::json::value& spec() const noexcept { return spec_; }
  std::optional<clock::time_point> deadline() const noexcept { return deadline_; }
  // The spec's integer "priority" (higher first; 0 when absent; clamped to +-kMaxPriority; the
  // job spec's validation refuses values outside that range) and when the job was made: the
  // ticket every stage queue orders it by (runtime/priority_channel.hpp).
  int priority() const noexcept { return priority_; }
  clock::time_point submitted() const noexcept { return submitted_; }
  static constexpr int kMaxPriority = 100;

  JobState state() const;
  bool is_finished() const;
  JobSnapshot snapshot() const;

  // Pipeline-side transitions; each emits an event.
  void enter_stage(JobState stage);
  void report_progress(int step, int total);
  // Progress that did not start at 0: the job went on from a checkpoint at `step` (the event's
  // message says so, and snapshot().resumed_from keeps it).
  void report_resumed(int step, int total);
  // Scheduling news (JobEvent::event): "admitted", "preempted" or "resumed" at `step` of `total`.
  // A preemption is counted in snapshot().preemptions.
  void report_scheduling(std::string_view event, int step, int total);
  // The step cache skipped `n` more denoiser calls for this job (carried by its next progress event).
  void record_skipped(int n);
  // A stage asks to go back into its own input queue instead of on to the next stage (the denoise
  // stage after a preemption); the pipeline takes the request once the stage returns.
  void request_requeue();
  bool take_requeue();
  // Keeps `preview` as the job's latest and emits an event carrying it (ignored once finished).
  void report_preview(std::shared_ptr<const JobPreview> preview);
  std::shared_ptr<const JobPreview> latest_preview() const;  // nullptr until the first
  void record_stage_time(std::string_view stage, double seconds);
  void record_retry();
  // First call wins; returns whether this call ended the job.
  bool finish(JobState terminal, std::exception_ptr error = {});

  // Cancellation. Returns false if the job had already finished.
  bool request_cancel(ErrorKind reason = ErrorKind::cancelled, std::string message = "cancelled");
  bool cancel_requested() const;
  // Throws Error(cancelled | deadline_exceeded) if cancellation was requested or the deadline
  // passed (a passed deadline also records the request).
  void throw_if_cancelled();
  AsyncEvent& cancel_event() noexcept { return cancel_event_; }

  // Whoever runs the job's current stage and can interrupt it. interrupt() is called under the
  // job's lock by request_cancel (so it must only post, never block or call back into the job);
  // after set_cancel_target(nullptr) returns it is never called again for that target.
  struct CancelTarget {
    virtual void interrupt(const std::shared_ptr<Job>& job) = 0;

   protected:
    ~CancelTarget() = default;
  };
  void set_cancel_target(CancelTarget* target);

  // Completion: set once finish() has run.
  AsyncEvent& finished_event() noexcept { return finished_event_; }
  std::exception_ptr error() const;

  // Listeners: called synchronously on the thread making the transition; keep them cheap.
  std::size_t subscribe(JobEventHandler handler);
  void unsubscribe(std::size_t token);

  std::any payload;  // stage-to-stage data (owned by the stage processing the job)

 private:
  void emit(const JobEvent& e);

  const std::string id_;
  const boost::json::value spec_;
  const std::optional<clock::time_point> deadline_;
  const clock::time_point submitted_ = clock::now();
  const int priority_ = 0;

  mutable std::mutex mutex_;
  JobState state_ = JobState::queued;
  int step_ = 0, total_ = 0;
  int retries_ = 0;
  int resumed_from_ = 0;
  int preemptions_ = 0, skipped_ = 0;
  bool requeue_ = false;
  std::optional<clock::time_point> started_, finished_at_;
  std::map<std::string, double> stage_seconds_;
  std::exception_ptr error_;
  std::optional<ErrorKind> cancel_reason_;
  std::string cancel_message_;
  std::map<std::size_t, JobEventHandler> listeners_;
  CancelTarget* cancel_target_ = nullptr;
  std::size_t next_listener_ = 0;
  std::shared_ptr<const JobPreview> preview_;

  AsyncEvent cancel_event_;
  AsyncEvent finished_event_;
};

}  // namespace vgen
