// Journal: the SQLite job store ("sqlite" in job_stores(), runtime/job_store.hpp): a durable
// record of jobs (WAL, synchronous=FULL), so that what a client was told survives a crash.
// vgen::Runtime writes a job's row before submit() returns (before `vgen serve` answers 202),
// claims it when its compute starts and updates it when the job ends. After a kill -9 a new
// Runtime over the same file resumes the unfinished jobs under their ids (or marks them
// interrupted, for `vgen batch`, which resumes from its prompt file) and still answers for
// finished ones. Outputs themselves are atomic, so a row marked done names a complete file.
// Journals written by earlier versions gain the new columns on open.
// Thread-safety: one connection behind a mutex; every member may be called from any thread.
// Every call blocks on the file (fsync).
#pragma once

#include "runtime/job_store.hpp"

#include <boost/json/object.hpp>

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace vgen {

using JournalRecord = JobRecord;  // the name the journal's users knew

class Journal final : public JobStore {
 public:
  // Opens or creates the file (Error(invalid_argument) naming it if it cannot).
  explicit Journal(const std::filesystem::path& file);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  void record_accepted(const std::string& id, const std::string& key, const boost::json::object& spec) override;
  void record_submitted(const std::string& id, const std::string& key, const boost::json::object& spec) {
    record_accepted(id, key, spec);
  }
  void forget(const std::string& id) override;
  int claim(const std::string& id) override;
  void unclaim(const std::string& id) override;
  void record_progress(const std::string& id, int step, int total, const std::string& checkpoint) override;
  void record_finished(const JobRecord& r) override;  // by r.id
  std::optional<JobRecord> find(const std::string& id) const override;
  std::optional<JobRecord> find_done(const std::string& key) const override;
  std::optional<JobRecord> find_output(const std::string& output) const override;
  std::vector<JobRecord> unfinished() const override;  // queued or running, in submission order
  void mark_unfinished_interrupted() override;
  JobPage list(const JobListQuery& query) const override;  // the cursor is the row's seq
  std::string location() const override { return file_.string(); }
  std::uint64_t max_job_number(const std::string& prefix) const;  // largest N of ids "<prefix>N"
  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  void exec(const char* sql) const;
  void add_missing_columns();
  std::optional<JobRecord> find_one(const char* where, const std::string& value) const;
  std::filesystem::path file_;
  sqlite3* db_ = nullptr;
  mutable std::mutex mutex_;
};

// Adds "sqlite" (a Journal at the given file) to job_stores(); idempotent, thread-safe.
void register_builtin_job_stores();

}  // namespace vgen
