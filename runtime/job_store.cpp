#include "runtime/job_store.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

namespace vgen {

std::optional<ErrorKind> error_kind_of(const JobRecord& record) {
  for (auto k : {ErrorKind::invalid_argument, ErrorKind::not_found, ErrorKind::already_exists, ErrorKind::overloaded, ErrorKind::cancelled,
                 ErrorKind::deadline_exceeded, ErrorKind::transient, ErrorKind::out_of_memory, ErrorKind::internal})
    if (to_string(k) == record.error_kind) return k;
  return std::nullopt;
}

namespace {

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Records in a map, in acceptance order by a sequence number.
class MemoryJobStore final : public JobStore {
 public:
  void record_accepted(const std::string& id, const std::string& key, const boost::json::object& spec) override {
    std::lock_guard lock(mutex_);
    JobRecord r;
    r.id = id;
    r.key = key;
    r.spec = spec;
    r.status = "queued";
    erase_locked(id);
    order_[++seq_] = id;
    rows_[id] = {seq_, std::move(r)};
  }
  void forget(const std::string& id) override {
    std::lock_guard lock(mutex_);
    erase_locked(id);
  }
  int claim(const std::string& id) override {
    std::lock_guard lock(mutex_);
    auto it = rows_.find(id);
    if (it == rows_.end()) return 0;
    auto& r = it->second.second;
    if (r.status == "queued" || r.status == "running") r.status = "running";
    return ++r.attempts;
  }
  void unclaim(const std::string& id) override {
    std::lock_guard lock(mutex_);
    auto it = rows_.find(id);
    if (it == rows_.end() || it->second.second.status != "running") return;
    it->second.second.status = "queued";
    if (it->second.second.attempts > 0) --it->second.second.attempts;
  }
  void record_progress(const std::string& id, int step, int total, const std::string& checkpoint) override {
    std::lock_guard lock(mutex_);
    if (auto it = rows_.find(id); it != rows_.end()) {
      it->second.second.step = step;
      it->second.second.total = total;
      it->second.second.checkpoint = checkpoint;
    }
  }
  void record_finished(const JobRecord& record) override {
    std::lock_guard lock(mutex_);
    auto it = rows_.find(record.id);
    if (it == rows_.end()) return;
    auto& r = it->second.second;
    const auto keep_key = r.key;
    auto spec = std::move(r.spec);
    const int attempts = r.attempts, step = r.step, total = r.total;
    r = record;
    r.key = keep_key;
    r.spec = std::move(spec);
    r.attempts = attempts;
    r.step = step;
    r.total = total;
    r.checkpoint.clear();  // removed when the job ends
    r.finished_unix = now_unix();
  }
  std::optional<JobRecord> find(const std::string& id) const override {
    std::lock_guard lock(mutex_);
    auto it = rows_.find(id);
    if (it == rows_.end()) return std::nullopt;
    return it->second.second;
  }
  std::optional<JobRecord> find_done(const std::string& key) const override {
    return newest_done([&](const JobRecord& r) { return r.key == key; });
  }
  std::optional<JobRecord> find_output(const std::string& output) const override {
    return newest_done([&](const JobRecord& r) { return r.output == output; });
  }
  std::vector<JobRecord> unfinished() const override {
    std::lock_guard lock(mutex_);
    std::vector<JobRecord> out;
    for (const auto& [seq, id] : order_) {
      const auto& r = rows_.at(id).second;
      if (r.status == "queued" || r.status == "running") out.push_back(r);
    }
    return out;
  }
  void mark_unfinished_interrupted() override {
    std::lock_guard lock(mutex_);
    for (auto& [id, row] : rows_)
      if (row.second.status == "queued" || row.second.status == "running") {
        row.second.status = "interrupted";
        row.second.finished_unix = now_unix();
      }
  }
  std::string location() const override { return "memory"; }
  // The cursor is the acceptance sequence number of the last row returned.
  JobPage list(const JobListQuery& query) const override {
    std::lock_guard lock(mutex_);
    JobPage page;
    const auto limit = std::max<std::size_t>(query.limit, 1);
    std::uint64_t last = 0;
    auto it = query.before == 0 ? order_.end() : order_.lower_bound(query.before);
    while (it != order_.begin()) {
      --it;
      const auto& r = rows_.at(it->second).second;
      if (!query.status.empty() && r.status != query.status) continue;
      if (page.jobs.size() == limit) {
        page.next = last;
        break;
      }
      page.jobs.push_back(r);
      last = it->first;
    }
    return page;
  }

 private:
  template <class Match>
  std::optional<JobRecord> newest_done(Match match) const {
    std::lock_guard lock(mutex_);
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      const auto& r = rows_.at(it->second).second;
      if (r.status == "done" && match(r)) return r;
    }
    return std::nullopt;
  }
  void erase_locked(const std::string& id) {
    if (auto it = rows_.find(id); it != rows_.end()) {
      order_.erase(it->second.first);
      rows_.erase(it);
    }
  }
  mutable std::mutex mutex_;
  std::uint64_t seq_ = 0;
  std::map<std::uint64_t, std::string> order_;
  std::map<std::string, std::pair<std::uint64_t, JobRecord>> rows_;
};

}  // namespace

std::unique_ptr<JobStore> make_memory_job_store() { return std::make_unique<MemoryJobStore>(); }

Registry<JobStoreFactory>& job_stores() {
  static Registry<JobStoreFactory> registry(
      "job store", {{"memory", [](const std::filesystem::path&) { return make_memory_job_store(); }}});
  return registry;
}

}  // namespace vgen
