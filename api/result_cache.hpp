// ResultCache: the Runtime's result cache and in-flight de-duplication, behind one small
// interface (the job store's companions: runtime/job_store.hpp).
//
//  - get(key): a finished output of an identical job (same content key), if it is still what
//    was written (same size and mtime; a png directory still exists); a stale entry is dropped.
//  - put(key, output): remembers a finished output for `ttl`, at most `entries` of them.
//  - lead(key, job): the first job of a key leads (renders); a later one gets the leader back
//    and waits for it (it then finds the output in the cache, or leads itself if the leader
//    failed). release(key, job) when the leader ends.
// Copies of cached outputs go through runtime/atomic_file (copy_atomically).
// Thread-safety: every member may be called from any thread.
#pragma once

#include "api/job_entry.hpp"
#include "runtime/content_key.hpp"
#include "runtime/ttl_cache.hpp"

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

namespace vgen::detail {

struct CachedOutput {
  std::filesystem::path path;
  std::uintmax_t bytes = 0;
  std::filesystem::file_time_type mtime;
};

class ResultCache {
 public:
  // entries 0: no caching (get finds nothing, put keeps nothing; lead always leads).
  ResultCache(std::size_t entries, std::chrono::steady_clock::duration ttl);

  bool enabled() const noexcept { return enabled_; }
  std::optional<CachedOutput> get(const ContentKey& key);
  void put(const ContentKey& key, const std::filesystem::path& output);
  // nullptr: `job` leads; else the job already leading `key`.
  std::shared_ptr<JobEntry> lead(const ContentKey& key, const std::shared_ptr<JobEntry>& job);
  void release(const ContentKey& key, const JobEntry* job);
  CacheStats stats() const { return cache_.stats(); }

 private:
  const bool enabled_;
  TtlCache<CachedOutput> cache_;
  std::mutex mutex_;
  std::map<ContentKey, std::shared_ptr<JobEntry>> inflight_;
};

}  // namespace vgen::detail
