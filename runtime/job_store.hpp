// JobStore: where a Runtime records the jobs it accepted, so that what a client was told
// survives a crash, and where it finds them again. Implementations are plug-ins chosen by
// name from job_stores():
//   "memory"  nothing survives the process (no journal configured);
//   "sqlite"  the embedded journal file (api/journal.hpp), the default with a journal;
// a broker-backed store (the fleet) registers the same way.
//
// A job's rows: record_accepted (status queued) before the Runtime acknowledges the job;
// claim when its compute starts (status running, one more attempt: an attempt that never
// ended is a crash); record_progress; record_finished (done | failed | cancelled). After a
// restart, unfinished() lists what was queued or running, in acceptance order;
// mark_unfinished_interrupted() ends them instead (a batch run resumes from its prompt file).
// find_done(key) is the newest finished output with a content key (the result cache's
// second level across restarts). list(query) pages through every recorded job, newest
// accepted first (GET /v1/jobs).
// record_progress records a job's last durable step checkpoint (stages/exec/checkpoint.hpp): its step
// and the file, so an operator (and a fleet worker on shared storage) can see where it resumes.
// Thread-safety: every member may be called from any thread. Calls block on I/O (a store
// may fsync): the Runtime calls record_accepted on the submitting thread (before it
// acknowledges the job), claim and record_finished on its one-thread "store" pool.
#pragma once

#include "runtime/errors.hpp"
#include "runtime/registry.hpp"

#include <boost/json/object.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace vgen {

struct JobRecord {
  std::string id;
  std::string key;           // the job's content key (hex)
  boost::json::object spec;  // as submitted
  std::string status;        // queued | running | done | failed | cancelled | interrupted
  std::string output;        // for done
  std::uint64_t output_bytes = 0;
  std::string content_type;
  std::string error_kind, error;  // to_string(ErrorKind) and the message, for failed | cancelled
  double seconds = 0;
  int retries = 0;
  bool cache_hit = false;
  int attempts = 0;          // claims so far (compute starts, restarts included)
  int step = 0, total = 0;   // last recorded progress (the last checkpoint's step)
  std::string checkpoint;    // the last checkpoint's file while unfinished; empty when none
  double finished_unix = 0;  // when it ended (seconds since the epoch); 0 while unfinished
};

// One page of JobStore::list: rows accepted before `before` (0: from the newest), with
// `status` when non-empty, at most `limit` of them, newest accepted first.
struct JobListQuery {
  std::string status;        // queued | running | done | failed | cancelled | interrupted, or empty: any
  std::size_t limit = 50;    // 0 is read as 1
  std::uint64_t before = 0;  // a JobPage::next from an earlier page; 0: the newest
};
struct JobPage {
  std::vector<JobRecord> jobs;
  std::uint64_t next = 0;  // the cursor of the following page (JobListQuery::before); 0: this was the last
};

// The ErrorKind a record carries (nullopt when it names none or an unknown one).
std::optional<ErrorKind> error_kind_of(const JobRecord& record);

class JobStore {
 public:
  virtual ~JobStore() = default;
  virtual void record_accepted(const std::string& id, const std::string& key, const boost::json::object& spec) = 0;
  virtual void forget(const std::string& id) = 0;  // a submission refused after all
  virtual int claim(const std::string& id) = 0;    // status running; returns its attempts so far
  // The claimed attempt ended without a result and without a crash (a graceful stop): back to
  // queued, and the attempt does not count (quarantine counts crashes only).
  virtual void unclaim(const std::string& id) = 0;
  virtual void record_progress(const std::string& id, int step, int total, const std::string& checkpoint) = 0;
  virtual void record_finished(const JobRecord& record) = 0;  // by record.id
  virtual std::optional<JobRecord> find(const std::string& id) const = 0;
  virtual std::optional<JobRecord> find_done(const std::string& key) const = 0;
  // The newest done job that wrote `output` (what a file there is, as far as the store knows).
  virtual std::optional<JobRecord> find_output(const std::string& output) const = 0;
  virtual std::vector<JobRecord> unfinished() const = 0;  // queued or running, in acceptance order
  virtual void mark_unfinished_interrupted() = 0;
  virtual JobPage list(const JobListQuery& query) const = 0;  // newest accepted first
  virtual std::string location() const = 0;  // for messages: a file, or "memory"
};

// Makes a store at `location` (a file for "sqlite"; ignored by "memory"); Error(invalid_argument)
// naming the location if it cannot be opened.
using JobStoreFactory = std::function<std::unique_ptr<JobStore>(const std::filesystem::path& location)>;
// Built-in: "memory". api/journal.cpp adds "sqlite" (register_builtin_job_stores()).
Registry<JobStoreFactory>& job_stores();

// The in-memory store (what "memory" makes).
std::unique_ptr<JobStore> make_memory_job_store();

}  // namespace vgen
