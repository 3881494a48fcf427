// ResultLookup: the result cache as the pipeline's before_first_stage hook
// (runtime/pipeline.hpp), so that no stage has to know about it.
//
//  - serve(job), the hook: a job whose content key has a finished output in the ResultCache is
//    served by a copy of it (made on the `copies` pool) and ends done before any stage; a job
//    whose key an identical job in flight leads waits for that leader's end and looks again
//    (the output is cached then, or the leader failed and this job leads); otherwise it leads
//    its key and goes on to render.
//  - finish(entry, result), once the job has ended: a rendered output into the cache, and the
//    lead released (which wakes the followers).
// Ownership: holds references to the cache and the pool, which outlive it.
// Thread-safety: every member may be called from any thread.
// Cancellation: serve() waits on a leader's end and on the copy; a cancel of the waiting job
// interrupts the wait (its pipeline worker emits the cancellation), a copy already running
// finishes first.
#pragma once

#include "api/job_entry.hpp"
#include "api/result_cache.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/worker_pool.hpp"

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>

namespace vgen::detail {

class ResultLookup {
 public:
  // What the lookup needs of the Runtime, for one job.
  struct Context {
    std::function<std::shared_ptr<JobEntry>(const std::string& id)> entry;  // nullptr: not registered
    std::function<ContentKey(const Job& job)> key;                         // the job's content key
    std::function<std::filesystem::path(const Job& job)> output;           // where the job writes
  };

  ResultLookup(ResultCache& cache, WorkerPool& copies, Context context);

  // The hook, named "lookup" (its queue and time show under that stage name).
  PipelineHook hook(std::size_t workers, std::size_t queue_capacity);
  boost::asio::awaitable<HookOutcome> serve(Job& job);
  void finish(JobEntry& entry, const JobResult& result);
  std::uint64_t hits() const noexcept { return hits_.load(); }

 private:
  ResultCache& cache_;
  WorkerPool& copies_;
  const Context context_;
  std::atomic<std::uint64_t> hits_{0};
};

}  // namespace vgen::detail
