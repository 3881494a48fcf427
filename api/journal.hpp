// Journal: a durable record of jobs in SQLite (WAL, synchronous=FULL), so that what a client
// was told survives a crash. vgen::Runtime writes a job's row before submit() returns (before
// `vgen serve` answers 202) and updates it when the job ends. After a kill -9 a new Runtime
// over the same file resumes the unfinished jobs under their ids (or marks them interrupted,
// for `vgen batch`, which resumes from its prompt file) and still answers for finished ones.
// Outputs themselves are atomic (temp + rename), so a row marked done names a complete file.
// Thread-safety: one connection behind a mutex; every member may be called from any thread.
#pragma once

#include <boost/json/object.hpp>

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace vgen {

struct JournalRecord {
  std::string id;
  std::string key;               // job content key (hex)
  boost::json::object spec;      // as submitted
  std::string status;            // queued | done | failed | cancelled | interrupted
  std::string output;            // for done
  std::uint64_t output_bytes = 0;
  std::string content_type;
  std::string error_kind, error;
  double seconds = 0;
  int retries = 0;
  bool cache_hit = false;
  double finished_unix = 0;  // when it ended (seconds since the epoch, ms precision); 0 while unfinished
};

class Journal {
 public:
  // Opens or creates the file (Error(invalid_argument) naming it if it cannot).
  explicit Journal(const std::filesystem::path& file);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  void record_submitted(const std::string& id, const std::string& key, const boost::json::object& spec);
  void record_finished(const JournalRecord& r);  // by r.id
  void forget(const std::string& id);            // a submission that was refused after all
  std::optional<JournalRecord> find(const std::string& id) const;
  std::vector<JournalRecord> unfinished() const;  // status queued, in submission order
  void mark_unfinished_interrupted();
  std::uint64_t max_job_number(const std::string& prefix) const;  // largest N of ids "<prefix>N"
  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  void exec(const char* sql) const;
  std::filesystem::path file_;
  sqlite3* db_ = nullptr;
  mutable std::mutex mutex_;
};

}  // namespace vgen
