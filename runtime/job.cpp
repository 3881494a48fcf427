#include "runtime/job.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace vgen {

std::string_view to_string(JobState s) noexcept {
  switch (s) {
    case JobState::queued: return "queued";
    case JobState::running: return "running";
    case JobState::done: return "done";
    case JobState::failed: return "failed";
    case JobState::cancelled: return "cancelled";
  }
  return "failed";
}

bool is_terminal(JobState s) noexcept {
  return s == JobState::done || s == JobState::failed || s == JobState::cancelled;
}

std::string_view status_name(JobState s, std::string_view stage) noexcept {
  return s == JobState::running && !stage.empty() ? stage : to_string(s);
}

namespace {

int priority_of(const boost::json::value& spec) {
  const auto* o = spec.if_object();
  const auto* p = o ? o->if_contains("priority") : nullptr;
  if (!p || !p->is_int64()) return 0;  // the job spec's validation names a bad value; the queue needs none
  return static_cast<int>(std::clamp<std::int64_t>(p->get_int64(), -Job::kMaxPriority, Job::kMaxPriority));
}

}  // namespace

Job::Job(std::string id, boost::json::value spec, std::optional<clock::time_point> deadline)
    : id_(std::move(id)), spec_(std::move(spec)), deadline_(deadline), priority_(priority_of(spec_)) {}

JobState Job::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

bool Job::is_finished() const { return is_terminal(state()); }

JobSnapshot Job::snapshot() const {
  std::lock_guard lock(mutex_);
  JobSnapshot s;
  s.id = id_;
  s.state = state_;
  s.stage = stage_;
  s.step = step_;
  s.total = total_;
  if (error_) {
    s.error_kind = classify(error_);
    s.error = describe(error_);
  }
  s.attempts = retries_;
  s.priority = priority_;
  s.detail = detail_;
  s.stage_seconds = stage_seconds_;
  const auto end = finished_at_.value_or(clock::now());
  s.queued_seconds = std::chrono::duration<double>(started_.value_or(end) - submitted_).count();
  s.total_seconds = std::chrono::duration<double>(end - submitted_).count();
  return s;
}

JobEvent Job::event_locked(int step, int total) const {
  JobEvent e;
  e.job_id = id_;
  e.state = state_;
  e.stage = stage_;
  e.step = step;
  e.total = total;
  return e;
}

void Job::enter_stage(std::string_view stage) {
  JobEvent e;
  {
    std::lock_guard lock(mutex_);
    if (is_terminal(state_)) return;
    state_ = JobState::running;
    stage_ = std::string(stage);
    step_ = total_ = 0;
    if (!started_) started_ = clock::now();
    e = event_locked(0, 0);
  }
  emit(e);
}

void Job::return_to_queue() {
  JobEvent e;
  {
    std::lock_guard lock(mutex_);
    if (is_terminal(state_)) return;
    state_ = JobState::queued;
    step_ = total_ = 0;
    e = event_locked(0, 0);
  }
  emit(e);
}

void Job::report_progress(int step, int total, boost::json::object detail, std::string message) {
  JobEvent e;
  {
    std::lock_guard lock(mutex_);
    if (is_terminal(state_)) return;
    step_ = step;
    total_ = total;
    e = event_locked(step, total);
  }
  e.detail = std::move(detail);
  e.message = std::move(message);
  emit(e);
}

void Job::edit_detail(const std::function<void(boost::json::object&)>& edit) {
  std::lock_guard lock(mutex_);
  edit(detail_);
}

void Job::request_requeue() {
  std::lock_guard lock(mutex_);
  requeue_ = true;
}

bool Job::take_requeue() {
  std::lock_guard lock(mutex_);
  return std::exchange(requeue_, false);
}

void Job::publish(std::string name, std::shared_ptr<const JobAttachment> attachment, int step, int total) {
  JobEvent e;
  {
    std::lock_guard lock(mutex_);
    if (is_terminal(state_) || !attachment) return;
    attachments_[name] = attachment;
    e = event_locked(step, total);
  }
  e.attachment_name = std::move(name);
  e.attachment = std::move(attachment);
  emit(e);
}

std::shared_ptr<const JobAttachment> Job::attachment(std::string_view name) const {
  std::lock_guard lock(mutex_);
  const auto it = attachments_.find(name);
  return it == attachments_.end() ? nullptr : it->second;
}

void Job::record_stage_time(std::string_view stage, double seconds) {
  std::lock_guard lock(mutex_);
  stage_seconds_[std::string(stage)] += seconds;
}

void Job::record_retry() {
  std::lock_guard lock(mutex_);
  ++retries_;
}

bool Job::finish(JobState terminal, std::exception_ptr error) {
  if (!is_terminal(terminal)) throw_error(ErrorKind::internal, "Job::finish needs a terminal state");
  JobEvent e;
  {
    std::lock_guard lock(mutex_);
    if (is_terminal(state_)) return false;
    state_ = terminal;
    error_ = error;
    finished_at_ = clock::now();
    e = event_locked(step_, total_);
    e.message = error ? describe(error) : std::string();
  }
  emit(e);
  finished_event_.set();
  return true;
}

bool Job::request_cancel(ErrorKind reason, std::string message) {
  {
    std::lock_guard lock(mutex_);
    if (is_terminal(state_)) return false;
    if (!cancel_reason_) {
      cancel_reason_ = reason;
      cancel_message_ = std::move(message);
    }
    if (cancel_target_) cancel_target_->interrupt(shared_from_this());
  }
  cancel_event_.set();
  return true;
}

void Job::set_cancel_target(CancelTarget* target) {
  std::lock_guard lock(mutex_);
  cancel_target_ = target;
}

bool Job::cancel_requested() const {
  std::lock_guard lock(mutex_);
  return cancel_reason_.has_value();
}

void Job::throw_if_cancelled() {
  if (deadline_ && clock::now() >= *deadline_)
    request_cancel(ErrorKind::deadline_exceeded, "job deadline exceeded");
  std::lock_guard lock(mutex_);
  if (cancel_reason_) throw Error(*cancel_reason_, cancel_message_);
}

std::exception_ptr Job::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

std::size_t Job::subscribe(JobEventHandler handler) {
  std::lock_guard lock(mutex_);
  listeners_.emplace(++next_listener_, std::move(handler));
  return next_listener_;
}

void Job::unsubscribe(std::size_t token) {
  std::lock_guard lock(mutex_);
  listeners_.erase(token);
}

void Job::emit(const JobEvent& e) {
  std::vector<JobEventHandler> targets;
  {
    std::lock_guard lock(mutex_);
    targets.reserve(listeners_.size());
    for (auto& [token, h] : listeners_) targets.push_back(h);
  }
  for (auto& h : targets) h(e);  // outside the lock: a listener may query the job
}

}  // namespace vgen
