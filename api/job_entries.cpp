#include "api/job_entries.hpp"

namespace vgen::detail {

std::shared_ptr<JobEntry> JobEntries::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second;
}

std::shared_ptr<JobEntry> JobEntries::add(const std::string& id, const std::function<void(JobEntry&)>& fill) {
  expire();
  auto entry = std::make_shared<JobEntry>();
  entry->id = id;
  std::lock_guard lock(mutex_);
  if (entries_.count(id)) throw_error(ErrorKind::already_exists, "id: a job with id '" + id + "' already exists");
  fill(*entry);
  entries_.emplace(id, entry);
  return entry;
}

std::shared_ptr<JobEntry> JobEntries::adopt(std::shared_ptr<JobEntry> entry) {
  std::lock_guard lock(mutex_);
  const auto id = entry->id;
  return entries_.emplace(id, std::move(entry)).first->second;
}

std::shared_ptr<JobEntry> JobEntries::remove(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  auto entry = std::move(it->second);
  entries_.erase(it);
  return entry;
}

std::vector<std::shared_ptr<JobEntry>> JobEntries::unfinished() const {
  std::vector<std::shared_ptr<JobEntry>> out;
  std::lock_guard lock(mutex_);
  for (const auto& [id, e] : entries_) {
    std::lock_guard entry_lock(e->mutex);
    if (!e->final_result) out.push_back(e);
  }
  return out;
}

void JobEntries::end(JobEntry& entry, const JobResult& result) {
  {
    std::lock_guard lock(entry.mutex);
    entry.final_result = result;
    entry.ended_at = clock::now();
  }
  {
    std::lock_guard lock(mutex_);
    finished_order_.emplace_back(entry.ended_at, entry.id);
  }
}

void JobEntries::resolve(JobEntry& entry, const JobResult& result) {
  entry.promise.set_value(result);
  entry.ended.set();
}

void JobEntries::expire() {
  const auto now = clock::now();
  std::lock_guard lock(mutex_);
  while (!finished_order_.empty() && now - finished_order_.front().first > ttl_) {
    const auto id = std::move(finished_order_.front().second);
    finished_order_.pop_front();
    if (auto it = entries_.find(id); it != entries_.end()) {
      std::lock_guard l(it->second->mutex);
      if (it->second->final_result && now - it->second->ended_at > ttl_) entries_.erase(it);
    }
  }
}

}  // namespace vgen::detail
