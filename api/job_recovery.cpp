#include "api/job_recovery.hpp"

#include "api/journal.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <filesystem>
#include <system_error>

namespace vgen::detail {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

std::unique_ptr<JobStore> open_store(const RuntimeConfig& config) {
  register_builtin_job_stores();
  return config.journal.empty() ? job_stores().get("memory")({}) : job_stores().get(config.job_store)(config.journal);
}

}  // namespace

JobRecovery::JobRecovery(const RuntimeConfig& config, MetricsRegistry& metrics, Hooks hooks)
    : config_(config), metrics_(metrics), hooks_(std::move(hooks)), store_(open_store(config)) {}

void JobRecovery::record_submitted(const std::string& id, const std::string& key_hex, const json::object& raw) {
  store_->record_accepted(id, key_hex, raw);
}

bool JobRecovery::ends_for_good(const JobEntry& entry, const JobResult& r, bool stopping) {
  return !(stopping && r.state == JobState::cancelled && !entry.cancelled_by_request);
}

void JobRecovery::record_finished(const JobEntry& entry, const JobResult& r, bool stopping) {
  if (!ends_for_good(entry, r, stopping)) {
    try {
      store_->unclaim(r.id);
    } catch (const std::exception& e) {
      spdlog::error("job store {}: {}", store_->location(), e.what());
    }
    return;
  }
  if (entry.key && hooks_.drop_checkpoint) hooks_.drop_checkpoint(entry.key->hex());  // ended for good: no resume needs it
  JobRecord rec;
  rec.id = r.id;
  rec.status = std::string(to_string(r.state));
  rec.output = r.output.string();
  std::error_code ec;
  if (r.state == JobState::done && fs::is_regular_file(r.output, ec)) rec.output_bytes = fs::file_size(r.output, ec);
  rec.content_type = r.content_type;
  if (r.error_kind) rec.error_kind = std::string(to_string(*r.error_kind));
  rec.error = r.error;
  rec.seconds = r.seconds;
  rec.retries = r.retries;
  rec.cache_hit = r.cache_hit;
  try {
    store_->record_finished(rec);
  } catch (const std::exception& e) {
    spdlog::error("job store {}: could not record the end of {}: {}", store_->location(), r.id, e.what());
  }
}

// Registration comes first, before the Runtime's constructor returns (so before a service
// takes requests): a resumed job is found by id and holds its output name from the start, not
// only once the resume coroutine, which waits for queue room, reaches it.
void JobRecovery::resume_unfinished(const asio::any_io_executor& ex) {
  if (!config_.resume_journal) {
    store_->mark_unfinished_interrupted();
    return;
  }
  auto records = quarantine(store_->unfinished());
  if (records.empty()) return;
  spdlog::info("job store {}: resuming {} unfinished job(s)", store_->location(), records.size());
  Pending pending;
  for (auto& rec : records) {
    try {
      pending.emplace_back(rec, hooks_.register_resumed(rec.id, hooks_.validate(json::value(rec.spec))));
    } catch (const std::exception& e) {
      fail_resume(rec, nullptr, e.what());
    }
  }
  asio::co_spawn(ex, resume(std::move(pending)), asio::detached);
}

std::vector<JobRecord> JobRecovery::quarantine(std::vector<JobRecord> records) {
  if (config_.quarantine_after == 0) return records;
  std::vector<JobRecord> keep;
  for (auto& rec : records) {
    if (static_cast<std::size_t>(rec.attempts) < config_.quarantine_after) {
      keep.push_back(std::move(rec));
      continue;
    }
    spdlog::error("job {} crashed the worker {} times: quarantined (failed, not run again)", rec.id, rec.attempts);
    rec.status = "failed";
    rec.error_kind = std::string(to_string(ErrorKind::internal));
    rec.error = "crashed the worker " + std::to_string(rec.attempts) + " times";
    try {
      store_->record_finished(rec);
    } catch (const std::exception& e) {
      spdlog::error("job store {}: {}", store_->location(), e.what());
    }
    metrics_.counter("vgen_jobs_quarantined_total", "Jobs failed because they crashed the worker repeatedly", {}).inc();
  }
  return keep;
}

// Suspects first, each alone: a job whose compute had started when a process died (claimed,
// attempts >= 1) may be what killed it, or may have been beside the job that did. Run alone,
// a crash can only be its own, so an innocent bystander is never quarantined (unless a new
// client job crashes the worker while a suspect reruns). Likely-innocent suspects (fewer
// attempts) go first; then the jobs that never started.
asio::awaitable<void> JobRecovery::resume(Pending pending) {
  const auto order = [](const JobRecord& r) { return r.attempts > 0 ? r.attempts : INT_MAX; };
  std::stable_sort(pending.begin(), pending.end(), [&](const auto& a, const auto& b) { return order(a.first) < order(b.first); });
  for (auto& [rec, entry] : pending) {
    try {
      if (entry->cancelled_by_request) throw_error(ErrorKind::cancelled, "cancelled by request before it resumed");
      json::value spec(rec.spec);  // a named local: GCC 12 mishandles class temporaries inside a co_await expression
      co_await hooks_.resubmit(std::move(spec), entry);
      if (rec.attempts > 0) co_await entry->ended.wait();  // a suspect runs alone
    } catch (const std::exception& e) {
      fail_resume(rec, entry, e.what());
    }
  }
}

// A graceful stop that comes first leaves the job unfinished in the store: it resumes next time.
void JobRecovery::fail_resume(JobRecord rec, const std::shared_ptr<JobEntry>& entry, const std::string& why) {
  const bool by_client = entry && entry->cancelled_by_request;
  const bool cancelled = by_client || (hooks_.stopping && hooks_.stopping());
  rec.status = cancelled ? "cancelled" : "failed";
  rec.error_kind = std::string(to_string(cancelled ? ErrorKind::cancelled : ErrorKind::invalid_argument));
  rec.error = cancelled ? why : "could not resume: " + why;
  if (by_client || !cancelled) {
    try {
      store_->record_finished(rec);
    } catch (const std::exception& again) {
      spdlog::error("job store {}: {}", store_->location(), again.what());
    }
  }
  if (!entry) return;
  JobResult r;
  r.id = rec.id;
  r.state = cancelled ? JobState::cancelled : JobState::failed;
  r.error_kind = cancelled ? ErrorKind::cancelled : ErrorKind::invalid_argument;
  r.error = rec.error;
  hooks_.end_entry(entry, r);
}

std::shared_ptr<JobEntry> JobRecovery::from_journal(const std::string& id) const {
  auto rec = store_->find(id);
  if (!rec || rec->status == "queued" || rec->status == "running") return nullptr;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (now - rec->finished_unix > static_cast<double>(config_.job_ttl.count())) return nullptr;  // kept as long as in memory
  auto entry = std::make_shared<JobEntry>();
  entry->id = id;
  JobResult r;
  r.id = id;
  r.state = rec->status == "done" ? JobState::done : rec->status == "failed" ? JobState::failed : JobState::cancelled;
  r.output = rec->output;
  r.content_type = rec->content_type;
  r.cache_hit = rec->cache_hit;
  r.retries = rec->retries;
  r.seconds = rec->seconds;
  r.error = rec->error.empty() && rec->status == "interrupted" ? "interrupted by a restart" : rec->error;
  if (r.state != JobState::done) r.error_kind = error_kind_of(*rec).value_or(rec->status == "interrupted" ? ErrorKind::cancelled : ErrorKind::internal);
  try {
    r.spec = hooks_.validate(json::value(rec->spec));
  } catch (...) {
  }
  entry->final_result = r;
  entry->ended_at = std::chrono::steady_clock::now();
  entry->promise.set_value(r);
  entry->ended.set();
  return entry;
}

}  // namespace vgen::detail
