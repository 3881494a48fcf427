#include "api/result_cache.hpp"


namespace vgen::detail {

namespace fs = std::filesystem;

namespace {

bool still_valid(const CachedOutput& c) {
  std::error_code ec;
  if (fs::is_directory(c.path, ec)) return true;
  return fs::is_regular_file(c.path, ec) && fs::file_size(c.path, ec) == c.bytes && fs::last_write_time(c.path, ec) == c.mtime;
}

}  // namespace

ResultCache::ResultCache(std::size_t entries, std::chrono::steady_clock::duration ttl)
    : enabled_(entries > 0), cache_(TtlCacheOptions{.max_entries = std::max<std::size_t>(entries, 1), .default_ttl = ttl}) {}

std::optional<CachedOutput> ResultCache::get(const ContentKey& key) {
  if (!enabled_) return std::nullopt;
  auto hit = cache_.get(key);
  if (hit && !still_valid(*hit)) {  // the file changed or went away: render again
    cache_.erase(key);
    return std::nullopt;
  }
  return hit;
}

void ResultCache::put(const ContentKey& key, const fs::path& output) {
  if (!enabled_) return;
  std::error_code ec;
  CachedOutput c{output, fs::is_regular_file(output, ec) ? fs::file_size(output, ec) : 0, fs::last_write_time(output, ec)};
  if (!ec) cache_.put(key, c);
}

std::shared_ptr<JobEntry> ResultCache::lead(const ContentKey& key, const std::shared_ptr<JobEntry>& job) {
  if (!enabled_) return nullptr;
  std::lock_guard lock(mutex_);
  auto [it, inserted] = inflight_.emplace(key, job);
  return inserted ? nullptr : it->second;
}

void ResultCache::release(const ContentKey& key, const JobEntry* job) {
  std::lock_guard lock(mutex_);
  if (auto it = inflight_.find(key); it != inflight_.end() && it->second.get() == job) inflight_.erase(it);
}

}  // namespace vgen::detail
