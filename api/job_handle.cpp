// JobHandle (api/engine.hpp): a view of one job's shared state (api/job_entry.hpp).
#include "api/engine.hpp"

#include "api/job_entry.hpp"

#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

namespace vgen {

namespace asio = boost::asio;
namespace json = boost::json;

// ---- JobHandle ----

JobHandle detail::make_job_handle(std::shared_ptr<JobEntry> entry) { return JobHandle(std::move(entry)); }

const std::string& JobHandle::id() const { return entry_->id; }

JobSnapshot JobHandle::snapshot() const {
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(entry_->mutex);
    job = entry_->job;
  }
  if (!job) return JobSnapshot{.id = entry_->id};
  return job->snapshot();
}

std::shared_ptr<const JobPreview> JobHandle::preview() const {
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(entry_->mutex);
    job = entry_->job;
  }
  return job ? latest_preview(*job) : nullptr;
}

bool JobHandle::finished() const {
  std::lock_guard lock(entry_->mutex);
  return entry_->final_result.has_value();
}

bool JobHandle::cancel(std::string reason) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard lock(entry_->mutex);
    job = entry_->job;
  }
  entry_->cancelled_by_request = true;
  return job && job->request_cancel(ErrorKind::cancelled, std::move(reason));
}

JobResult JobHandle::result() const {
  std::lock_guard lock(entry_->mutex);
  if (entry_->final_result) return *entry_->final_result;
  JobResult r;
  r.id = entry_->id;
  r.spec = entry_->spec;
  if (entry_->job) {
    const auto s = entry_->job->snapshot();
    // Terminal only once published: until then it reads as still in its last stage.
    r.state = is_terminal(s.state) ? JobState::running : s.state;
    r.stage = s.stage;
    r.retries = s.attempts;
    r.seconds = s.total_seconds;
    r.stage_seconds = s.stage_seconds;
  }
  return r;
}

JobResult JobHandle::wait() const { return entry_->future.get(); }
std::shared_future<JobResult> JobHandle::future() const { return entry_->future; }

asio::awaitable<JobResult> JobHandle::async_wait() const {
  auto entry = entry_;
  co_await entry->ended.wait();
  co_return entry->future.get();
}

std::size_t JobHandle::subscribe(JobEventHandler handler) const {
  std::lock_guard lock(entry_->mutex);
  const auto token = entry_->next_listener++;
  entry_->listeners.emplace(token, std::move(handler));
  return token;
}

void JobHandle::unsubscribe(std::size_t token) const {
  std::lock_guard lock(entry_->mutex);
  entry_->listeners.erase(token);
}

}  // namespace vgen
