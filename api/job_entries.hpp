// JobEntries: the Runtime's jobs by id (api/job_entry.hpp), from registration until job_ttl
// after their end, and the one place a job's final result is published.
//
//  - add(id, fill): registers a new entry under `id` atomically: Error(already_exists) if the id
//    is taken; `fill` completes the entry (reserves its output, ...) under the same lock, so
//    two submissions of one id never both get that far.
//  - end(entry, result) makes the result the entry's final one (JobHandle::finished() says so);
//    resolve(entry, result) then completes its future and its `ended` event (publish: both).
//    The entry is forgotten job_ttl after its end (expire(), called on every add: O(expired)).
// Ownership: entries are shared with JobHandles, which keep theirs alive after it is forgotten.
// Thread-safety: every member may be called from any thread. `fill` runs under the registry's
// lock: it must not call back into it.
#pragma once

#include "api/job_entry.hpp"

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace vgen::detail {

class JobEntries {
 public:
  using clock = std::chrono::steady_clock;
  explicit JobEntries(clock::duration ttl) : ttl_(ttl) {}

  std::shared_ptr<JobEntry> find(const std::string& id) const;  // nullptr if unknown (or expired)
  std::shared_ptr<JobEntry> add(const std::string& id, const std::function<void(JobEntry&)>& fill);
  // `entry` under its id unless one is there already; returns the one that is.
  std::shared_ptr<JobEntry> adopt(std::shared_ptr<JobEntry> entry);
  std::shared_ptr<JobEntry> remove(const std::string& id);  // nullptr if unknown
  std::vector<std::shared_ptr<JobEntry>> unfinished() const;

  void end(JobEntry& entry, const JobResult& result);
  static void resolve(JobEntry& entry, const JobResult& result);
  void publish(JobEntry& entry, const JobResult& result) {
    end(entry, result);
    resolve(entry, result);
  }
  void expire();  // forgets finished entries older than the ttl, oldest first

 private:
  const clock::duration ttl_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<JobEntry>> entries_;
  std::deque<std::pair<clock::time_point, std::string>> finished_order_;
};

}  // namespace vgen::detail
