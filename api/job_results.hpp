// JobResults: watches each job the Runtime admitted and publishes its result once it ends:
// what the render produced (or the result cache's copy), the output name released, the result
// cache told (api/result_lookup.hpp), its webhook event recorded durably (api/webhooks.hpp) and
// then the job store's record, both on the store's own thread (an fsync must not stall the io
// threads), then the entry's future and event (api/job_entries.hpp). The event comes first so
// that a crash between the two loses no event (the job resumes and its event id is the same).
// Ownership: refers to the Runtime's parts (Parts), which outlive it; each watch holds its job
// and entry until published, then frees the job's stage data (Job::payload).
// Thread-safety: every member may be called from any thread.
// Cancellation: a watch waits for its job's end, which every job reaches (runtime/pipeline.hpp);
// wait_all() waits for every watch started, so call it once intake has stopped.
#pragma once

#include "api/job_entries.hpp"
#include "api/job_recovery.hpp"
#include "api/output_reservations.hpp"
#include "api/result_lookup.hpp"
#include "api/webhooks.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/worker_pool.hpp"
#include "stages/exec/model_set.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <memory>

namespace vgen::detail {

class JobResults {
 public:
  struct Parts {
    const ModelSet& models;
    JobEntries& entries;
    OutputReservations& outputs;
    JobRecovery& recovery;
    WorkerPool& store_pool;
    ResultLookup* lookup;               // nullptr: no result cache
    const std::atomic<bool>& stopping;  // a graceful stop: cancelled jobs stay unfinished in the store
    Webhooks* webhooks = nullptr;       // nullptr: no webhook endpoints
    const FaultInjector* faults = nullptr;  // the "webhook" crash drill: after the end is recorded, before any send
    LiveStreams* live = nullptr;            // a job's live stream is ended and forgotten once its end is published
  };
  explicit JobResults(Parts parts) : parts_(parts) {}

  // Sets `job` as the entry's and publishes its result when it ends (a coroutine on `executor`).
  void watch(const std::shared_ptr<JobEntry>& entry, std::shared_ptr<Job> job, const boost::asio::any_io_executor& executor);
  // Every watch has published its job's result; the last one to end wakes this.
  boost::asio::awaitable<void> wait_all();
  // The end of a registered job that never ran (one that could not be resumed).
  void end_unrun(JobEntry& entry, const JobResult& result);

  JobResult result_of(const JobEntry& entry, const Job& job) const;

 private:
  boost::asio::awaitable<void> watch_one(std::shared_ptr<JobEntry> entry, std::shared_ptr<Job> job);
  boost::asio::awaitable<void> publish(JobEntry& entry, const Job& job);
  void record_webhook(const JobResult& r) const;  // logs, never throws: the job's result stands

  const Parts parts_;
  std::atomic<std::size_t> watchers_{0};
  std::atomic<bool> waiting_{false};
  AsyncEvent none_left_;
};

}  // namespace vgen::detail
