#include "runtime/pipeline.hpp"

#include "runtime/trace.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <set>

namespace vgen {

namespace asio = boost::asio;

namespace {

// co_spawn(..., detached) swallows exceptions (shared/STACK.md): log them instead.
auto log_failure(std::string what) {
  return [what = std::move(what)](std::exception_ptr e) {
    if (e) spdlog::error("{} ended with an exception: {}", what, describe(e));
  };
}

JobState terminal_state_for(const std::exception_ptr& error) {
  return classify(error) == ErrorKind::cancelled ? JobState::cancelled : JobState::failed;
}

QueueTicket ticket_of(const Job& job) { return {job.priority(), job.submitted()}; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// One per stage worker: the worker coroutine runs on `strand`, bound to `signal`'s slot. While
// it runs a job's stage it is that job's CancelTarget; a cancel request posts to the strand and
// emits a terminal cancellation if the job is still the one running there (so a late request
// never reaches the next job). Shared with posted handlers, which may outlive the Pipeline.
struct Pipeline::WorkerSlot final : Job::CancelTarget, std::enable_shared_from_this<WorkerSlot> {
  WorkerSlot(asio::any_io_executor ex, std::string track) : strand(asio::make_strand(std::move(ex))), track(std::move(track)) {}

  void interrupt(const std::shared_ptr<Job>& job) override {
    asio::post(strand, [self = shared_from_this(), job] {
      if (self->current == job.get()) self->signal.emit(asio::cancellation_type::terminal);
    });
  }

  asio::strand<asio::any_io_executor> strand;
  asio::cancellation_signal signal;
  const Job* current = nullptr;  // only touched on `strand`
  const std::string track;       // its trace track, "<stage> worker <n>"
};

namespace {

// The hook as the pipeline's first stage (its queue, workers and metrics); process() runs its fn.
std::vector<StageSpec> with_hook(std::vector<StageSpec> stages, const std::optional<PipelineHook>& hook) {
  if (stages.empty()) throw_error(ErrorKind::invalid_argument, "pipeline needs at least one stage");
  if (!hook) return stages;
  if (!hook->fn) throw_error(ErrorKind::invalid_argument, "pipeline hook '" + hook->name + "' has no function");
  StageSpec first;
  first.name = hook->name;
  first.workers = hook->workers;
  first.queue_capacity = hook->queue_capacity;
  stages.insert(stages.begin(), std::move(first));
  return stages;
}

}  // namespace

Pipeline::Pipeline(asio::any_io_executor executor, std::vector<StageSpec> stages, PipelineOptions options)
    : executor_(std::move(executor)),
      stages_(with_hook(std::move(stages), options.before_first_stage)),
      options_(std::move(options)),
      live_workers_(stages_.size()) {
  if (options_.before_first_stage) hook_fn_ = options_.before_first_stage->fn;
  if (options_.aging.count() <= 0) throw_error(ErrorKind::invalid_argument, "pipeline aging must be positive");
  std::set<std::string> names;
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    const auto& s = stages_[k];
    if (s.name.empty() || !names.insert(s.name).second)
      throw_error(ErrorKind::invalid_argument, "pipeline stage names must be unique and non-empty ('" + s.name + "')");
    if (!s.fn && !is_hook(k)) throw_error(ErrorKind::invalid_argument, "pipeline stage '" + s.name + "' has no function");
    if (s.workers == 0) throw_error(ErrorKind::invalid_argument, "pipeline stage '" + s.name + "': workers must be >= 1");
    if (s.queue_capacity == 0)
      throw_error(ErrorKind::invalid_argument, "pipeline stage '" + s.name + "': queue_capacity must be >= 1");
    if (s.retry) s.retry->validate();
    queues_.push_back(std::make_unique<PriorityChannel<JobPtr>>(s.queue_capacity, options_.aging));
  }
  stage_metrics_.resize(stages_.size());
  if (auto* m = options_.metrics) {
    submitted_total_ = &m->counter("vgen_jobs_submitted_total", "Jobs accepted by the pipeline");
    rejected_total_ = &m->counter("vgen_jobs_rejected_total", "Jobs refused (queue full or shutting down)");
    in_flight_ = &m->gauge("vgen_jobs_in_flight", "Jobs accepted and not yet finished");
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      const Labels l{{"stage", stages_[i].name}};
      stage_metrics_[i].depth = &m->gauge("vgen_queue_depth", "Jobs waiting in a stage's input queue", l);
      stage_metrics_[i].seconds = &m->histogram("vgen_stage_duration_seconds", "Time a job spent in a stage", l);
      stage_metrics_[i].retries = &m->counter("vgen_stage_retries_total", "Stage attempts retried", l);
    }
    for (auto s : {JobState::done, JobState::failed, JobState::cancelled})
      m->counter("vgen_jobs_finished_total", "Jobs finished, by final state", {{"state", std::string(to_string(s))}});
  }
}

Pipeline::~Pipeline() = default;

void Pipeline::start() {
  if (started_.exchange(true)) return;
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    live_workers_[k] = stages_[k].workers;
    // Each worker runs on its own strand, and its stage functions with it: a cancellation is
    // emitted on that strand, so it is never concurrent with the cancelled operation's own
    // completion (Asio's cancellation slots are not thread-safe).
    for (std::size_t w = 0; w < stages_[k].workers; ++w) {
      auto slot = std::make_shared<WorkerSlot>(executor_, stages_[k].name + " worker " + std::to_string(w));
      auto strand = slot->strand;
      auto cancel_slot = slot->signal.slot();
      asio::co_spawn(strand, run_worker(k, std::move(slot)),
                     asio::bind_cancellation_slot(cancel_slot, log_failure("worker of stage " + stages_[k].name)));
    }
  }
}

Pipeline::JobPtr Pipeline::make_job(boost::json::value spec, std::string id,
                                    std::optional<Job::clock::time_point> deadline) {
  if (!accepting_) throw_error(ErrorKind::overloaded, "the pipeline is shutting down");
  if (!deadline && options_.default_deadline) deadline = Job::clock::now() + *options_.default_deadline;
  std::lock_guard lock(mutex_);
  if (id.empty()) id = "job-" + std::to_string(++next_id_);
  if (active_.count(id)) throw_error(ErrorKind::invalid_argument, "job id '" + id + "' is already in use");
  auto job = std::make_shared<Job>(id, std::move(spec), deadline);
  if (options_.on_event) job->subscribe(options_.on_event);
  active_.emplace(id, job);
  if (options_.tracer && options_.tracer->enabled()) queued_at_[job.get()] = std::chrono::steady_clock::now();
  ++counts_.submitted;
  ++counts_.in_flight;
  if (in_flight_) in_flight_->inc();
  return job;
}

void Pipeline::admit(const JobPtr& job) {
  if (submitted_total_) submitted_total_->inc();
  if (stage_metrics_[0].depth) stage_metrics_[0].depth->set(static_cast<double>(queues_[0]->size()));
  if (job->deadline())
    asio::co_spawn(asio::make_strand(executor_), watch_deadline(job), log_failure("deadline watch"));
}

void Pipeline::reject(const JobPtr& job, std::string why) {
  // Whoever ends the job does its accounting: if a cancel ended it while it waited to enter
  // the queue, it stays counted as submitted and cancelled, and the caller gets it back.
  if (!job->finish(JobState::failed, std::make_exception_ptr(Error(ErrorKind::overloaded, why)))) return;
  {
    std::lock_guard lock(mutex_);
    active_.erase(job->id());
    queued_at_.erase(job.get());
    --counts_.submitted;
    --counts_.in_flight;
    ++counts_.rejected;
  }
  if (rejected_total_) rejected_total_->inc();
  if (in_flight_) in_flight_->dec();
  if (options_.after_job_end) options_.after_job_end();
  throw Error(ErrorKind::overloaded, std::move(why));
}

std::shared_ptr<Job> Pipeline::try_submit(boost::json::value spec, std::string id,
                                          std::optional<Job::clock::time_point> deadline) {
  auto job = make_job(std::move(spec), std::move(id), deadline);
  JobPtr queued = job;
  if (!queues_[0]->try_enqueue(queued, ticket_of(*job))) {
    reject(job, accepting_ ? "the job queue is full" : "the pipeline is shutting down");
    return job;  // reject() returns only when a cancel already ended the job
  }
  admit(job);
  return job;
}

asio::awaitable<std::shared_ptr<Job>> Pipeline::submit(boost::json::value spec, std::string id,
                                                      std::optional<Job::clock::time_point> deadline) {
  auto job = make_job(std::move(spec), std::move(id), deadline);
  auto [ec] = co_await queues_[0]->enqueue(job, ticket_of(*job), asio::as_tuple(asio::use_awaitable));
  if (ec) {
    reject(job, ec == channel_errc::closed ? "the pipeline is shutting down" : "submission cancelled");
    co_return job;  // reject() returns only when a cancel already ended the job
  }
  admit(job);
  co_return job;
}

bool Pipeline::cancel(const std::string& id, std::string reason) {
  auto job = find(id);
  if (!job || !job->request_cancel(ErrorKind::cancelled, std::move(reason))) return false;
  // A job still waiting in the first queue ends now; the worker that dequeues it skips it.
  if (job->state() == JobState::queued) {
    try {
      job->throw_if_cancelled();
    } catch (...) {
      end_job(job, terminal_state_for(std::current_exception()), std::current_exception());
    }
  }
  return true;
}

std::shared_ptr<Job> Pipeline::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = active_.find(id);
  return it == active_.end() ? nullptr : it->second;
}

asio::awaitable<void> Pipeline::watch_deadline(JobPtr job) {
  asio::steady_timer timer(co_await asio::this_coro::executor, *job->deadline());
  auto [order, timer_ec, finished_ec] = co_await asio::experimental::make_parallel_group(
      timer.async_wait(asio::deferred),
      job->finished_event().wait(asio::bind_executor(timer.get_executor(), asio::deferred)))
      .async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
  if (order[0] == 0 && !timer_ec && job->request_cancel(ErrorKind::deadline_exceeded, "job deadline exceeded") &&
      job->state() == JobState::queued) {
    end_job(job, JobState::failed, std::make_exception_ptr(Error(ErrorKind::deadline_exceeded, "job deadline exceeded")));
  }
}

asio::awaitable<void> Pipeline::run_worker(std::size_t k, std::shared_ptr<WorkerSlot> slot) {
  auto& queue = *queues_[k];
  for (;;) {
    auto [ec, next] = co_await queue.dequeue(asio::as_tuple(asio::use_awaitable));
    if (ec || !next) break;  // end of stream: intake closed and this queue drained
    if (stage_metrics_[k].depth) stage_metrics_[k].depth->set(static_cast<double>(queue.size()));
    JobPtr job = std::move(*next);
    std::exception_ptr error;
    try {
      co_await process(k, job, *slot);
    } catch (...) {
      error = std::current_exception();
    }
    if (error) end_job(job, terminal_state_for(error), error);
  }
  on_worker_exit(k);
}

asio::awaitable<void> Pipeline::process(std::size_t k, JobPtr job, WorkerSlot& slot) {
  if (job->is_finished()) co_return;  // ended while queued (cancelled, deadline)
  job->throw_if_cancelled();
  // A hook's job stays queued; its event says a worker took it, as a stage's does.
  if (is_hook(k)) job->return_to_queue();
  else job->enter_stage(stages_[k].name);
  const auto t0 = std::chrono::steady_clock::now();
  std::exception_ptr error;
  bool ended_early = false;
  slot.current = job.get();
  job->set_cancel_target(&slot);
  try {
    job->throw_if_cancelled();  // a request that came before the target was set
    ended_early = co_await run_stage(k, *job);
  } catch (...) {
    error = std::current_exception();
  }
  job->set_cancel_target(nullptr);
  slot.current = nullptr;
  // A cancellation emitted for this job leaves the worker's state cancelled: clear it before
  // the worker awaits anything else.
  if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
    co_await asio::this_coro::reset_cancellation_state();
  const double took = seconds_since(t0);
  job->record_stage_time(stages_[k].name, took);
  trace_stage(k, *job, slot, t0, error);
  if (stage_metrics_[k].seconds) stage_metrics_[k].seconds->observe(took);
  if (error) {
    // Interrupted by the job's cancellation (operation_aborted from an await): report the
    // job's own reason (cancelled / deadline_exceeded), not the aborted operation.
    if (job->cancel_requested()) job->throw_if_cancelled();
    std::rethrow_exception(error);
  }
  if (job->is_finished()) co_return;
  if (ended_early) {  // the hook finished it: no stage runs (a cancel meanwhile is too late, as below)
    end_job(job, JobState::done);
    co_return;
  }
  // The last stage returned: its work (the output file) is complete, so a cancel that came
  // meanwhile is too late, and the job is done (a signal must not call a written video cancelled).
  const bool requeue = job->take_requeue();
  const std::size_t next = next_stage(k, *job);
  if (next == stages_.size() && !requeue) {
    end_job(job, JobState::done);
    co_return;
  }
  job->throw_if_cancelled();  // cancelled while its last step ran: end it here
  if (requeue) {  // back into this stage's queue (never waits, see requeue)
    job->return_to_queue();  // queued again: a cancel or deadline ends it at once
    mark_queued(*job);
    queues_[k]->requeue(job, ticket_of(*job));
    if (stage_metrics_[k].depth) stage_metrics_[k].depth->set(static_cast<double>(queues_[k]->size()));
    co_return;
  }
  // The next queue cannot be closed while a worker of this stage is alive (it is closed only
  // when the last of them exits, and a queue further down only after the queues above it), so
  // this either succeeds or waits: the job is never lost.
  mark_queued(*job);
  co_await queues_[next]->enqueue(job, ticket_of(*job), asio::use_awaitable);
  if (stage_metrics_[next].depth) stage_metrics_[next].depth->set(static_cast<double>(queues_[next]->size()));
}

std::size_t Pipeline::next_stage(std::size_t k, const Job& job) const {
  std::size_t next = k + 1;
  while (next < stages_.size() && stages_[next].applies && !stages_[next].applies(job)) ++next;
  return next;
}

asio::awaitable<bool> Pipeline::run_stage(std::size_t k, Job& job) {
  // The stage runs inside this worker's coroutine (no spawn per stage): a cancel request
  // reaches its awaits through the worker's cancellation slot (WorkerSlot::interrupt).
  if (is_hook(k)) co_return co_await hook_fn_(job) == HookOutcome::done;
  const StageSpec& stage = stages_[k];
  AsyncSemaphore::Permit permit;
  if (stage.limiter) permit = co_await stage.limiter->acquire_permit();
  job.throw_if_cancelled();
  if (stage.before) {
    co_await stage.before(job);
    job.throw_if_cancelled();
  }
  if (!stage.retry) {
    co_await stage.fn(job);
    co_return false;
  }
  RetryOptions retry_options;
  retry_options.policy = *stage.retry;
  retry_options.name = stage.name + " of " + job.id();
  retry_options.seed = options_.retry_seed;
  Counter* retries = stage_metrics_[k].retries;
  retry_options.observer = [&job, retries, tracer = options_.tracer, &stage](const RetryAttempt& a) {
    if (!a.will_retry) return;
    job.record_retry();
    if (retries) retries->inc();
    if (tracer)
      tracer->instant("jobs", "job " + job.id(), "retry " + stage.name, std::chrono::steady_clock::now(),
                      {{"attempt", a.attempt}, {"error", a.error}, {"next_delay_ms", a.next_delay.count()}});
  };
  // An attempt interrupted by the job's cancellation fails with operation_aborted, classified
  // `cancelled` and so not retried; process() then reports the job's own reason.
  std::function<asio::awaitable<void>()> op = [&stage, &job] { return stage.fn(job); };
  co_await retry<void>(std::move(retry_options), std::move(op));
  co_return false;
}

void Pipeline::end_job(const JobPtr& job, JobState state, std::exception_ptr error) {
  if (!job->finish(state, error)) return;
  {
    std::lock_guard lock(mutex_);
    active_.erase(job->id());
    queued_at_.erase(job.get());
    --counts_.in_flight;
    if (state == JobState::done) ++counts_.done;
    else if (state == JobState::failed) ++counts_.failed;
    else ++counts_.cancelled;
  }
  if (in_flight_) in_flight_->dec();
  if (auto* m = options_.metrics)
    m->counter("vgen_jobs_finished_total", "Jobs finished, by final state", {{"state", std::string(to_string(state))}}).inc();
  if (options_.after_job_end) options_.after_job_end();
}

void Pipeline::on_worker_exit(std::size_t k) {
  if (--live_workers_[k] != 0) return;
  if (k + 1 < stages_.size()) queues_[k + 1]->close();  // end of stream flows downstream
  else all_workers_done_.set();
}

// When the job entered its next queue: the start of its "queued <stage>" span.
void Pipeline::mark_queued(const Job& job) {
  if (!options_.tracer || !options_.tracer->enabled()) return;
  std::lock_guard lock(mutex_);
  queued_at_[&job] = std::chrono::steady_clock::now();
}

void Pipeline::trace_stage(std::size_t k, const Job& job, const WorkerSlot& slot, std::chrono::steady_clock::time_point t0,
                           const std::exception_ptr& error) {
  auto* tracer = options_.tracer;
  if (!tracer || !tracer->enabled()) return;
  std::optional<std::chrono::steady_clock::time_point> queued;
  {
    std::lock_guard lock(mutex_);
    if (auto it = queued_at_.find(&job); it != queued_at_.end()) {
      queued = it->second;
      queued_at_.erase(it);
    }
  }
  const auto now = std::chrono::steady_clock::now();
  const auto& name = stages_[k].name;
  const auto track = "job " + job.id();
  if (queued) tracer->span("jobs", track, "queued " + name, *queued, t0);
  boost::json::object args{{"job", job.id()}};
  if (error) args["error"] = describe(error);
  tracer->span("jobs", track, name, t0, now, args);
  tracer->span("stages", slot.track, name, t0, now, std::move(args));
}

void Pipeline::close_intake() {
  accepting_ = false;
  queues_[0]->close();
}

asio::awaitable<void> Pipeline::drain() {
  start();  // a pipeline that never started still has to run what it accepted
  close_intake();
  co_await all_workers_done_.wait(asio::use_awaitable);
}

asio::awaitable<void> Pipeline::shutdown() {
  accepting_ = false;
  std::vector<JobPtr> unfinished;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, job] : active_) unfinished.push_back(job);
  }
  for (auto& job : unfinished) cancel(job->id(), "cancelled by shutdown");
  co_await drain();
}

std::size_t Pipeline::waiting_above(std::string_view stage, int priority) const {
  for (std::size_t k = 0; k < stages_.size(); ++k)
    if (stages_[k].name == stage) return queues_[k]->count_above(priority);
  return 0;
}

PipelineCounts Pipeline::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace vgen
