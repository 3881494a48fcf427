// Internal to vgen_engine: the shared state behind a JobHandle (api/job_entries.hpp keeps and
// publishes it, api/job_handle.cpp reads it). Not installed for embedders' use.
// Thread-safety: `mutex` guards job, final_result, listeners and ended_at; fields the lookup
// hook writes (key, leader, cached_output) are read only after the job has ended.
#pragma once

#include "api/engine.hpp"
#include "runtime/content_key.hpp"
#include "runtime/event.hpp"

#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>

namespace vgen::detail {

// One job as the Runtime sees it. Fields written by the lookup hook (api/result_lookup.hpp:
// key, leader, cache_hit, output for hits) are read only after the job has ended; `mutex`
// guards the rest.
struct JobEntry {
  std::string id;
  std::shared_ptr<Job> job;
  std::atomic<bool> cache_hit{false};
  std::atomic<bool> cancelled_by_request{false};  // by its client (Runtime::cancel, JobHandle::cancel)
  std::optional<ContentKey> key;
  bool leader = false;     // registered in the in-flight map under `key`
  std::filesystem::path cached_output;  // the copy made for a cache hit
  std::filesystem::path output;         // where the job writes (reserved while it runs)
  JobSpec spec;            // as admitted (set at registration, never changed)
  AsyncEvent ended;        // set after `result` is final
  std::promise<JobResult> promise;
  std::shared_future<JobResult> future = promise.get_future().share();
  mutable std::mutex mutex;
  std::optional<JobResult> final_result;
  std::map<std::size_t, JobEventHandler> listeners;
  std::size_t next_listener = 0;
  std::chrono::steady_clock::time_point ended_at;

  void emit(const JobEvent& e) {
    std::vector<JobEventHandler> copy;
    {
      std::lock_guard lock(mutex);
      for (const auto& [_, h] : listeners) copy.push_back(h);
    }
    for (const auto& h : copy) h(e);
  }
};

}  // namespace vgen::detail
