// Checkpoints: a denoising job's StepState (stages/family.hpp: step index, latents, its row of
// the scheduler's multistep history) written to disk every few steps or seconds, so that after
// a crash (kill -9, power cut, a lost fleet worker) the job goes on from its last checkpoint
// instead of step 0, and ends with the same bytes as an uninterrupted run.
//
// Files: <dir>/<content key hex>.ckpt. A job's content key (stages/job_spec.hpp) names what it
// computes, so a checkpoint serves any job with that key: a resumed service job (same id), a
// batch rerun (new ids) or another worker reading shared storage. Written whole with
// write_file_atomically (temp, fsync, rename); the format (checkpoint.cpp) ends with a SHA-256
// of everything before it, and a file that does not verify, or whose identity, step count or
// shapes do not match the job, is ignored (counted, removed): the job starts at step 0.
//
// Policy: a job is checkpointed when its steps >= min_steps, its scheduler is resumable
// (deterministic) and it has no step cache (whose state the loop keeps); then after a step once every_steps steps or every_seconds seconds have
// passed since its last checkpoint (or its start), never after its last step. Disk use is
// bounded: one file per job content, and the files' total stays under max_bytes (a checkpoint
// that would pass it is skipped and counted). Files are removed when their job ends (done,
// failed or cancelled by its client; not on a graceful stop, which leaves jobs to resume), and
// files older than keep_for are removed at start.
//
// Threads: after_step() runs on a compute thread and only copies the due rows (clone); the
// writes run in order on a one-thread pool of their own ("checkpoint"), so the step loop never
// waits for a disk. begin/load/drop may be called from any thread; load blocks on file I/O
// (call it off the io threads). Thread-safe throughout. Cancellation: a write that started
// finishes; a dropped key's pending write is skipped.
#pragma once

#include "runtime/job.hpp"
#include "runtime/metrics.hpp"
#include "runtime/worker_pool.hpp"

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace vgen {

// stages/family.hpp and stages/scheduler.hpp (this header stays free of LibTorch: api/ sees it).
struct StepState;
struct FamilyJob;
class Scheduler;

struct CheckpointOptions {
  std::filesystem::path dir;  // empty: checkpoints off
  int every_steps = 0;        // 0: not by steps
  double every_seconds = 30;  // 0: not by time
  int min_steps = 10;         // jobs with fewer steps are not checkpointed
  std::uint64_t max_bytes = std::uint64_t{1} << 30;
  std::chrono::hours keep_for{24 * 7};
  std::function<void(const std::string&)> warn;  // optional: where damaged or failed checkpoints are told
  bool enabled() const { return !dir.empty() && (every_steps > 0 || every_seconds > 0); }
};

// Written after each checkpoint is durable (on the checkpoint thread): for the job store's
// reference and drills (fault injection's crash after a checkpoint).
struct CheckpointWritten {
  std::string job_id;
  std::filesystem::path file;
  int step = 0, total = 0;
};

// The on-disk form (checkpoint.cpp); exposed for tests and tools.
std::string encode_checkpoint(const std::string& identity, int total, const StepState& state);
// False (and `out` untouched) unless the bytes are a whole, verified checkpoint of `identity`
// with `total` steps.
bool decode_checkpoint(std::string_view bytes, const std::string& identity, int total, StepState& out);

class Checkpoints {
 public:
  using OnWritten = std::function<void(const std::vector<CheckpointWritten>&)>;
  // Sweeps `options.dir` if it exists (created by the first write; removed at destruction if
  // empty), counting the files kept toward max_bytes. The pool is the "checkpoint" pool (one
  // thread, outliving this object's last write); metrics optional.
  Checkpoints(CheckpointOptions options, WorkerPool& pool, MetricsRegistry* metrics, OnWritten on_written = {});
  ~Checkpoints();

  const CheckpointOptions& options() const noexcept { return options_; }
  std::filesystem::path file_for(const std::string& key_hex) const;

  // A job enters denoising with content key `key_hex`: remembered for after_step.
  void begin(const Job& job, const std::string& key_hex, int step);
  void end(const Job& job);  // it left denoising (its file stays until drop)
  // Puts the saved state for `key_hex` into `work.state` if a valid one exists for its steps
  // and latents' shape (prepare has drawn its noise); returns the step it resumes at, or 0.
  // Blocks on file I/O.
  int restore(const std::string& key_hex, FamilyJob& work);
  // The job with this key ended for good: its file goes (after any pending write).
  void drop(const std::string& key_hex);

  // The step loop's hook (BatcherOptions::after_step).
  void after_step(const std::vector<Job*>& jobs, const std::vector<FamilyJob*>& work, const Scheduler& scheduler);

  std::uint64_t disk_bytes() const;

 private:
  struct Tracked {
    std::string key;
    int last_step = 0;
    std::chrono::steady_clock::time_point last_time;
  };
  struct Pending;  // a due checkpoint's copy (checkpoint.cpp)
  void write(const std::vector<Pending>& due);
  void account(const std::string& key, std::uint64_t bytes);  // under mutex_
  void count(const char* name, const char* help, double by = 1);
  void warn(const std::string& message) const;

  const CheckpointOptions options_;
  WorkerPool& pool_;
  MetricsRegistry* metrics_;
  OnWritten on_written_;
  mutable std::mutex mutex_;
  std::map<const Job*, Tracked> running_;
  std::map<std::string, std::uint64_t> files_;  // key -> bytes on disk
  std::set<std::string> dropped_;  // ended keys: their pending writes are skipped
  std::uint64_t bytes_ = 0;
};

}  // namespace vgen
