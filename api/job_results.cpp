#include "api/job_results.hpp"

#include "stages/media/encode.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <chrono>

namespace vgen::detail {

namespace asio = boost::asio;

namespace {

std::string content_type_of(const std::string& format) { return format == "png" ? "inode/directory" : content_type_for(format); }

}  // namespace

void JobResults::watch(const std::shared_ptr<JobEntry>& entry, std::shared_ptr<Job> job, const asio::any_io_executor& executor) {
  {
    std::lock_guard lock(entry->mutex);
    entry->job = job;
  }
  watchers_.fetch_add(1);
  asio::co_spawn(executor, watch_one(entry, std::move(job)), asio::detached);
}

asio::awaitable<void> JobResults::watch_one(std::shared_ptr<JobEntry> entry, std::shared_ptr<Job> job) {
  co_await job->finished_event().wait(asio::use_awaitable);
  std::exception_ptr failed;  // a store that cannot record the end: the stream still ends, the count still drops
  try {
    co_await publish(*entry, *job);
  } catch (...) {
    failed = std::current_exception();
  }
  if (parts_.live) parts_.live->close(entry->id);  // after the end is visible: see Runtime::live_stream
  job->payload.reset();  // the result is copied out: free the job's tensors (frames, latents) now
  if (watchers_.fetch_sub(1) == 1 && waiting_.load()) none_left_.set();
  if (failed) std::rethrow_exception(failed);
}

// Called once intake has stopped, so no new watch starts.
asio::awaitable<void> JobResults::wait_all() {
  waiting_ = true;
  if (watchers_.load() == 0) co_return;
  co_await none_left_.wait(asio::use_awaitable);
}

asio::awaitable<void> JobResults::publish(JobEntry& entry, const Job& job) {
  JobResult r = result_of(entry, job);
  parts_.outputs.release(entry.output, entry.id);
  if (parts_.lookup) parts_.lookup->finish(entry, r);
  // Recorded before the result is visible anywhere (a waiter, the job's status, a listing): one
  // that saw the job end finds it in the store too, so GET /v1/jobs/{id} never says done while
  // GET /v1/jobs?status=done does not list it yet. On the store's own thread.
  auto record = [this, &entry, &r, &job] {
    const bool ends = parts_.webhooks && JobRecovery::ends_for_good(entry, r, parts_.stopping);
    if (ends) record_webhook(r);  // durable before the end is: a crash in between loses no event
    parts_.recovery.record_finished(entry, r, parts_.stopping);
    if (ends) {
      if (parts_.faults) parts_.faults->crash_if("webhook", job.spec());
      parts_.webhooks->wake();
    }
    return 0;
  };
  co_await parts_.store_pool.run(record, asio::use_awaitable);
  parts_.entries.end(entry, r);
  JobEntries::resolve(entry, r);
}

void JobResults::end_unrun(JobEntry& entry, const JobResult& r) {
  // A job that never ran (quarantined, or not resumable): its end is in the store already.
  if (parts_.webhooks && JobRecovery::ends_for_good(entry, r, parts_.stopping)) {
    record_webhook(r);
    parts_.webhooks->wake();
  }
  parts_.outputs.release(entry.output, entry.id);
  parts_.entries.publish(entry, r);
  if (parts_.live) parts_.live->close(entry.id);  // a client may have opened its stream while it waited
}

void JobResults::record_webhook(const JobResult& r) const {
  try {
    parts_.webhooks->record(job_end_event(r.id, r.state));
  } catch (const std::exception& e) {
    spdlog::error("webhooks: could not record the end of {}: {}", r.id, e.what());
  }
}

JobResult JobResults::result_of(const JobEntry& entry, const Job& job) const {
  const auto s = job.snapshot();
  JobResult r;
  r.id = s.id;
  r.state = s.state;
  r.stage = s.stage;
  r.retries = s.attempts;
  r.resumed_from_step = parts_.models.resumed_from(job);
  r.seconds = s.total_seconds;
  r.stage_seconds = s.stage_seconds;
  r.error_kind = s.error_kind;
  r.error = s.error;
  r.cache_hit = entry.cache_hit.load();
  try {
    r.spec = parts_.models.validate(job.spec());
  } catch (...) {
  }
  r.content_type = content_type_of(r.spec.format);
  if (s.state == JobState::done) {
    if (r.cache_hit) {
      r.output = entry.cached_output;
    } else {
      const auto w = parts_.models.result(job);
      r.output = w.output;
      r.device = w.device;
      r.text_cache_hit = w.text_cache_hit;
      r.spec = w.spec;
    }
  }
  return r;
}

}  // namespace vgen::detail
