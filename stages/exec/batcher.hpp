// Batcher: cross-job batching for the preprocess, denoise and decode stages, generic over the
// model-family interface (stages/family.hpp). Jobs that may share a model call join one group:
//  - preprocess: jobs with the same Family::prepare_key (one prepare() call, e.g. one
//    text-encoder call for the group's uncached prompts);
//  - denoise: jobs with the same Family::denoise_key (interchangeable loops: shape, steps,
//    scheduler, guidance on/off) and the same next step (a job resumed from a checkpoint
//    goes on from its step); the group runs the step loop (stages/denoise_loop.hpp). While it
//    runs, a job with the same denoise_key (at any step) joins it at its next step boundary
//    as long as it holds fewer than max_batch live jobs (BatcherOptions::join_running false:
//    never; it waits for the next group), and each member leaves the group (its join()
//    returns) as soon as its own last step is done;
//  - decode: jobs with the same Family::decode_key; one decode() call.
// Every key starts with the family name and package id, so jobs of different families never
// share a group.
// A preprocess or decode group of a model that a running denoise group holds a device for runs
// on that device's compute thread between its steps, without a lease of its own (else new jobs
// could not be prepared to join it, nor its finished members decoded, until it ends). A running
// group admits joiners only while no other group waits for a device, so it drains and gives the
// device up as soon as other work needs it.
// A group emptied while it waits for the device (an earlier group of its key took its jobs in
// when placed, see set_max_batch) gives up its queued acquire at once and ends: it holds no place
// in the device's queue that other work waits behind.
// A group collects until it holds max_batch jobs (the joiner that fills it wakes it: no
// polling) or `wait` has passed since its first job, then asks for the device and keeps
// collecting until the device is granted: under load the group grows while earlier work
// runs, on an idle device it starts at once. max_batch 1 runs each job alone at once.
//
// Priority and preemption: with a waiting probe set (set_waiting_probe: how many jobs above a
// priority wait to enter denoise, e.g. Pipeline::waiting_above), a running group that has no
// room for them lets its lowest-priority rows (the newest first among equals) go at the next
// step boundary, one per higher-priority waiter beyond its free room. A preempted job keeps its
// StepState (latents + scheduler row, as a checkpoint does), its join() returns after
// Job::request_requeue(), and it resumes later from that step with an identical result (in this
// group, another or a new one). Not preempted: jobs with the step cache on (its state is not in
// StepState), schedulers that are not resumable, and a job already preempted
// BatcherOptions::max_preemptions times (so a stream of higher-priority work cannot bounce it
// forever). Aging orders the queues but never preempts: only a strictly higher priority does.
// Waiters the probe does not see are not helped: a job of another denoise key waiting for the
// device (in a Batcher group), or one held upstream behind a full denoise queue.
//
// Ownership and cancellation: a group runs in its own coroutine on the runtime's executor,
// not in any job's stage, so cancelling one job (its stage stops waiting) never stops the
// others; the group drops a cancelled job between calls. Results are written into the jobs'
// FamilyJob state only when the group's work completes, so a failed group leaves its jobs as
// they were (a retry starts clean). Out of memory moves before it shrinks: a group whose call
// fails with Error(out_of_memory) returns its lease and runs again, whole, on another device
// with room (each device at most once); when none has room, it fails its jobs (the stage's
// retry policy retries them) and halves the batch size for jobs of its key, down to one.
// Thread-safety: join() may be called from any thread. The Batcher must outlive its groups
// (the stages hold it by shared_ptr).
#pragma once

#include "runtime/device_pool.hpp"
#include "runtime/event.hpp"
#include "runtime/executor.hpp"
#include "runtime/metrics.hpp"
#include "stages/exec/batch_kind.hpp"
#include "stages/exec/batching_options.hpp"
#include "stages/families/family.hpp"
#include "stages/exec/step_cache.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

namespace vgen {

class Tracer;  // runtime/trace.hpp

std::string_view to_string(BatchKind kind);

// Where a group's compute runs: a lease from the DevicePool and that device's worker pool.
struct Placement {
  DeviceLease lease;
  WorkerPool* pool = nullptr;
  std::string device;
};

struct BatcherOptions {
  BatchingOptions batching;  // max_batch (0 counts as 1), wait, join_running
  Executor* executor = nullptr;  // holds a "device:<id>" pool per device
  DevicePool* devices = nullptr;
  MetricsRegistry* metrics = nullptr;  // optional: histogram vgen_batch_size{stage}
  Tracer* tracer = nullptr;            // optional: a span per model call on its compute thread's track
  // Called on the compute thread before every denoiser call (fault injection's simulated
  // out-of-memory); may throw. Arguments: jobs in the call, device, first job id, its retries.
  std::function<void(std::size_t, const std::string&, const std::string&, int)> before_denoise;
  // The most times one job is preempted (then it stays until its group ends or it finishes).
  int max_preemptions = 3;
  // Called on the compute thread after every denoise step with the live members (jobs and their
  // states, in row order; state.step is the next step) and the group's scheduler: checkpoints
  // (stages/checkpoint.hpp). Must not throw; keep it short (the group's next step waits).
  std::function<void(const std::vector<Job*>&, const std::vector<FamilyJob*>&, const Scheduler&)> after_step;
  // Called (on an io thread, outside the Batcher's lock) when out of memory caps a key's batch:
  // the group key ("denoise|<Family::denoise_key>", ...) and its new cap. The auto-tuner's
  // cached batch for that shape follows it (stages/exec/auto_tune.hpp).
  std::function<void(const std::string& key, std::size_t cap)> on_capped;
  // Called on the compute thread after every model call that succeeded: its kind, the group key
  // (denoise: without the "from step k" part), the jobs (rows) in the call and its wall seconds.
  // The auto-tuner learns from running jobs with it (api/runtime_tuning.hpp). Must not throw;
  // keep it short (the group waits).
  std::function<void(BatchKind kind, const std::string& key, std::size_t jobs, double seconds)> on_model_call;
};

class Batcher {
 public:
  explicit Batcher(BatcherOptions options);

  // Runs `kind` for `job` (its FamilyJob payload, of `family`) in some group; returns when
  // the job's part is done. Throws the group's error, or Error(cancelled) for a cancelled job.
  boost::asio::awaitable<void> join(std::shared_ptr<Family> family, Job& job, BatchKind kind);

  std::size_t max_batch() const noexcept { return max_batch_.load(); }
  // A group's cap by kind: max_batch, for decode groups at most batching.max_decode_batch (when > 0).
  std::size_t cap_for(BatchKind kind) const noexcept;
  // The auto-tuner switches the batch size (api/runtime_tuning.hpp) at group boundaries, never
  // inside a running group: groups formed after this call take the new cap, and a group that
  // waits for a device, when it gets one, takes in the jobs of later groups of its key that
  // wait too, up to the cap of that moment (so a raise reaches jobs already queued for the
  // device, e.g. all of a `vgen batch`; those groups then end empty, giving their lease back).
  // Out-of-memory caps still bound it. Any thread.
  void set_max_batch(std::size_t max_batch) noexcept { max_batch_.store(std::max<std::size_t>(max_batch, 1)); }
  // How many groups ran with each size (observability and tests).
  std::map<std::size_t, std::uint64_t> group_sizes(BatchKind kind) const;
  // The keys of the groups run so far, with their sizes, in order (tests).
  std::vector<std::pair<std::string, std::size_t>> group_log() const;
  // Groups moved to another device after running out of memory.
  std::uint64_t oom_moves() const;
  // Jobs preempted so far (tests, observability).
  std::uint64_t preemptions() const;

  // How many jobs with a priority above the argument wait to enter denoise; called by running
  // groups at step boundaries on an io thread (must be cheap and thread-safe). Unset: no
  // preemption. May be set at any time, from any thread.
  using WaitingProbe = std::function<std::size_t(int priority)>;
  void set_waiting_probe(WaitingProbe probe);
  std::shared_ptr<const WaitingProbe> waiting_probe() const;
  void count_preemption();

  // How a member's part ended: `done` is set once (its result is in its FamilyJob, or `error`).
  struct Outcome {
    AsyncEvent done;
    std::exception_ptr error;
    bool preempted = false;  // it left a running group early; its StepState says where to go on
  };
  struct Member {
    std::shared_ptr<Job> job;
    std::shared_ptr<FamilyJob> work;  // shared with the job's payload
    std::unique_ptr<Scheduler> scheduler;  // denoise only
    bool dropped = false;
    std::shared_ptr<Outcome> outcome = std::make_shared<Outcome>();
    // Denoise only, owned by the step loop (the group's strand):
    bool finished = false;  // it has left the group: its last step is done, or it was preempted
    StepState entry;        // its state when the loop took it (restored if the group fails)
    StepCache cache;        // its step cache (threshold from its spec; off at 0)
  };
  struct Group {
    BatchKind kind = BatchKind::denoise;
    std::string key;
    std::string base_key;  // denoise: the key without the "from step k" part (who may join it running)
    std::shared_ptr<Family> family;
    std::vector<Member> members;
    bool closed = false;  // no more joins (full, timed out, or running)
    AsyncEvent full;      // set by the joiner that fills the group
    AsyncEvent done;      // set when the group's work has ended (results or error)
    std::exception_ptr error;
    // Jobs joining the group while its step loop runs (denoise), under `joins`: the loop admits
    // them at its next step boundary; `accepting` goes false when the loop ends.
    std::mutex joins;
    std::vector<Member> pending;
    bool accepting = false;
    std::size_t active = 0;  // live members + pending (the loop keeps it up to date)
    std::size_t cap = 1;     // the most jobs at once (max_batch, or less after out of memory)
    std::string device;      // where it runs (denoise, while running; under the Batcher's lock)
    WorkerPool* pool = nullptr;
    boost::asio::any_io_executor strand;        // runs run_group (set before it is spawned)
    boost::asio::cancellation_signal unplace;  // emitted on `strand`: an earlier group took its jobs, its acquire goes
  };

 private:
  boost::asio::awaitable<void> run_group(std::shared_ptr<Group> group);
  boost::asio::awaitable<void> collect(Group& group);
  boost::asio::awaitable<std::optional<Placement>> place(Group& group);
  boost::asio::awaitable<void> run_once(Group& group, const Placement& placement);
  void report_audio_decode(Group& group);
  boost::asio::awaitable<void> run_work(Group& group, const Placement& placement);
  std::optional<Placement> place_elsewhere(const Group& group, const std::vector<std::string>& avoid);
  void record_size(const Group& group);
  void close(Group& group);
  void close_taking_waiting(Group& group);
  static boost::asio::awaitable<void> await_outcome(Job& job, std::shared_ptr<Outcome> outcome);
  bool join_running(const std::string& base_key, Member& self, std::shared_ptr<Outcome>& outcome);
  std::optional<Placement> borrow(const Group& group);
  void stop_running(Group& group);
  const BatcherOptions options_;
  std::atomic<std::size_t> max_batch_;  // options_.batching.max_batch until set_max_batch
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Group>> open_;  // collecting groups by key
  std::map<std::string, std::vector<std::shared_ptr<Group>>> waiting_;  // full, not yet placed, by key (oldest first)
  std::map<std::string, std::shared_ptr<Group>> running_;  // running denoise groups by base_key
  std::map<std::pair<BatchKind, std::size_t>, std::uint64_t> sizes_;
  std::vector<std::pair<std::string, std::size_t>> log_;
  std::map<std::string, std::size_t> caps_;  // batch size limits learnt from out-of-memory errors
  std::uint64_t oom_moves_ = 0;
  std::uint64_t preemptions_ = 0;
  std::shared_ptr<const WaitingProbe> probe_;
};

// Members whose jobs are not cancelled (the others are marked dropped).
std::vector<Batcher::Member*> live_members(Batcher::Group& group);

}  // namespace vgen
