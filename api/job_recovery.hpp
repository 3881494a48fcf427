// JobRecovery: the Runtime's job store and what it does across restarts: opens the configured
// store, records each job's acceptance and end, fails the jobs that crashed the worker too
// often (quarantine), resubmits a crashed run's unfinished jobs, and rebuilds a finished job
// from the store when it is no longer in memory.
// Internal to vgen_engine (api/engine.cpp owns one); not installed for embedders' use.
// Ownership: owns the JobStore; borrows the config and the metrics registry (both outlive it).
// It knows nothing of the pipeline or the models: the Runtime hands it hooks for that.
// Thread-safety: every member may be called from any thread (the store is thread-safe; the
// hooks must be too). Blocking: the record_* calls and from_journal write/read the store
// (a SQLite write may fsync): call them off the io threads where that matters.
// Cancellation: resume() is detached on the Runtime's executor; a job cancelled by its client
// before it resumed ends cancelled; one a graceful stop ended stays unfinished in the store
// (it resumes next time). The hooks must stay valid as long as resume() runs.
#pragma once

#include "api/config.hpp"
#include "api/job_entry.hpp"
#include "runtime/job_store.hpp"
#include "runtime/metrics.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace vgen::detail {

class JobRecovery {
 public:
  struct Hooks {
    // The job's spec as the runtime admits it; throws on a spec it refuses.
    std::function<JobSpec(const boost::json::value&)> validate;
    // Registers a resumed job under its id (found by id, holding its output name); may throw.
    std::function<std::shared_ptr<JobEntry>(const std::string& id, const JobSpec&)> register_resumed;
    // Resubmits a registered job (waits for queue room); returns once it is admitted.
    std::function<boost::asio::awaitable<void>(boost::json::value spec, std::shared_ptr<JobEntry>)> resubmit;
    // Publishes a registered job's end that never ran: frees its output name, sets its final
    // result, wakes its waiters.
    std::function<void(const std::shared_ptr<JobEntry>&, const JobResult&)> end_entry;
    // A job ended for good: its step checkpoint (by content key) is no longer needed.
    std::function<void(const std::string& key_hex)> drop_checkpoint;
    // Whether the runtime is stopping (shutdown or drain): a job failed now stays resumable.
    std::function<bool()> stopping;
  };

  // Opens config.job_store at config.journal, or a memory store when no journal is given;
  // throws what the store throws (the Runtime then fails to construct).
  JobRecovery(const RuntimeConfig& config, MetricsRegistry& metrics, Hooks hooks);

  JobStore& store() const { return *store_; }

  void record_submitted(const std::string& id, const std::string& key_hex, const boost::json::object& raw);
  // The end of a job. A job that a graceful stop cancelled (`stopping`, not by its client)
  // stays unfinished: it resumes, and the attempt the stop ended is not a crash. Store errors
  // are logged, not thrown (the job's result stands).
  void record_finished(const JobEntry& entry, const JobResult& r, bool stopping);
  // Whether record_finished records `r` as the job's end (false: a graceful stop's cancel, resumed later).
  static bool ends_for_good(const JobEntry& entry, const JobResult& r, bool stopping);

  // Every unfinished job is registered (through the hooks) before this returns, then resumed
  // by a coroutine detached on `ex`. Without config.resume_journal they are marked interrupted.
  void resume_unfinished(const boost::asio::any_io_executor& ex);

  // Fails the records whose compute started config.quarantine_after times in processes that
  // died (each claim of an unfinished job is an attempt that never ended); returns the others.
  std::vector<JobRecord> quarantine(std::vector<JobRecord> records);

  // Ends a job that could not be resubmitted: in the store, and (when registered) its entry.
  void fail_resume(JobRecord rec, const std::shared_ptr<JobEntry>& entry, const std::string& why);

  // A job finished before a restart, as recorded in the store, as an ended entry (not
  // registered anywhere); null when unknown, unfinished, or older than config.job_ttl.
  std::shared_ptr<JobEntry> from_journal(const std::string& id) const;

 private:
  using Pending = std::vector<std::pair<JobRecord, std::shared_ptr<JobEntry>>>;
  boost::asio::awaitable<void> resume(Pending pending);

  const RuntimeConfig& config_;
  MetricsRegistry& metrics_;
  Hooks hooks_;
  std::unique_ptr<JobStore> store_;
};

}  // namespace vgen::detail
