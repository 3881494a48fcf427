// Job: one request moving through the pipeline, and the record of what happened to it.
//
// Lifecycle: queued -> running (a named stage, one after another) -> done | failed | cancelled
// (a stage may send the job back to queued). finish() is the only way into a terminal state
// and only its first call wins, so a job ends exactly once.
// The core knows no stage's vocabulary: a stage says more about its job through a JSON detail
// (on an event, and the job's lasting detail that snapshot() shows) and through named
// attachments (the latest of each kept with the job); the stages that write them define what
// they mean, and front ends pass them on.
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

#include <boost/json/object.hpp>
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

enum class JobState { queued, running, done, failed, cancelled };
std::string_view to_string(JobState s) noexcept;
bool is_terminal(JobState s) noexcept;
// What a job's status reads as outside: the name of the stage it runs while running, else the
// state's name ("queued", "done", ...).
std::string_view status_name(JobState s, std::string_view stage) noexcept;

// Something a stage publishes about a job (e.g. an image of it), kept as the job's latest under
// its name. Immutable once made: shared between the job, its events and readers, who downcast
// it to the type the publishing stage defines.
struct JobAttachment {
  virtual ~JobAttachment() = default;
};

struct JobEvent {
  std::string job_id;
  JobState state = JobState::queued;
  std::string stage;  // the stage running it (state running); the last one it ran otherwise
  int step = 0;       // progress within the stage (e.g. step i of total)
  int total = 0;
  std::string message;  // error text for failed/cancelled; a stage's note for progress
  // What the stage said with this progress event, in its own words (empty for state changes).
  boost::json::object detail;
  // Set on the event that publishes a new attachment only (Job::publish).
  std::string attachment_name;
  std::shared_ptr<const JobAttachment> attachment;

  std::string_view status() const noexcept { return status_name(state, stage); }
};
using JobEventHandler = std::function<void(const JobEvent&)>;

struct JobSnapshot {
  std::string id;
  JobState state = JobState::queued;
  std::string stage;  // as JobEvent::stage
  int step = 0, total = 0;
  std::optional<ErrorKind> error_kind;
  std::string error;
  int attempts = 0;  // stage attempts beyond the first (retries)
  int priority = 0;
  boost::json::object detail;  // the job's lasting detail (Job::edit_detail)
  std::map<std::string, double> stage_seconds;
  double queued_seconds = 0;  // submission -> first stage
  double total_seconds = 0;   // submission -> terminal (or now)

  std::string_view status() const noexcept { return status_name(state, stage); }
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

  // Pipeline-side transitions; each emits an event (ignored once finished).
  void enter_stage(std::string_view stage);  // running `stage`
  void return_to_queue();                    // queued (again): a requeued job, or one a hook took
  // Progress within the running stage: step of total, with the stage's `detail` and note
  // (JobEvent::detail, JobEvent::message).
  void report_progress(int step, int total, boost::json::object detail = {}, std::string message = {});
  // Changes the job's lasting detail (snapshot().detail). `edit` runs under the job's lock: keep
  // it short, and never call back into the job from it.
  void edit_detail(const std::function<void(boost::json::object&)>& edit);
  // A stage asks to go back into its own input queue instead of on to the next stage (e.g. a
  // job that gave way to a higher-priority one); the pipeline takes the request once the stage
  // returns.
  void request_requeue();
  bool take_requeue();
  // Keeps `attachment` as the job's latest under `name` and emits an event carrying it, at
  // `step` of `total` (the job's own progress stays as it is). Ignored once finished or null.
  void publish(std::string name, std::shared_ptr<const JobAttachment> attachment, int step, int total);
  std::shared_ptr<const JobAttachment> attachment(std::string_view name) const;  // nullptr until the first
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
  JobEvent event_locked(int step, int total) const;  // under mutex_: the job's state and stage
  void emit(const JobEvent& e);

  const std::string id_;
  const boost::json::value spec_;
  const std::optional<clock::time_point> deadline_;
  const clock::time_point submitted_ = clock::now();
  const int priority_ = 0;

  mutable std::mutex mutex_;
  JobState state_ = JobState::queued;
  std::string stage_;
  int step_ = 0, total_ = 0;
  int retries_ = 0;
  boost::json::object detail_;
  bool requeue_ = false;
  std::optional<clock::time_point> started_, finished_at_;
  std::map<std::string, double> stage_seconds_;
  std::exception_ptr error_;
  std::optional<ErrorKind> cancel_reason_;
  std::string cancel_message_;
  std::map<std::size_t, JobEventHandler> listeners_;
  CancelTarget* cancel_target_ = nullptr;
  std::size_t next_listener_ = 0;
  std::map<std::string, std::shared_ptr<const JobAttachment>, std::less<>> attachments_;

  AsyncEvent cancel_event_;
  AsyncEvent finished_event_;
};

}  // namespace vgen
