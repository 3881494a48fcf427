#include "api/fleet/fleet_client.hpp"

#include "api/fleet/fleet_queue.hpp"
#include "api/fleet/live_relay.hpp"
#include "api/job_entry.hpp"
#include "api/webhooks.hpp"
#include "runtime/metrics.hpp"
#include "runtime/job_id.hpp"
#include "api/fleet/nats_client.hpp"
#include "runtime/trace.hpp"
#include "stages/media/image_admission.hpp"
#include "stages/media/probe.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>

namespace vgen {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// How long a submit blocked on a full stream waits for a job to end before it tries again anyway
// (see State::wait_for_room).
constexpr std::chrono::milliseconds kSubmitBackstop{1000};

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A plain name: what workers can use as a file name or a subject token.
void check_name(const json::object& spec, const char* field) {
  const auto* v = spec.if_contains(field);
  if (!v) return;
  if (!v->is_string() || v->get_string().empty())
    throw_error(ErrorKind::invalid_argument, std::string(field) + ": must be a non-empty string");
  const std::string s(v->get_string());
  if (s.find('/') != std::string::npos || s.find('\\') != std::string::npos || s == "." || s == ".." || s.size() > 200)
    throw_error(ErrorKind::invalid_argument, std::string(field) + ": '" + s + "' must be a plain name (no path)");
}

json::object light_validate(const json::value& spec) {
  if (!spec.is_object()) throw_error(ErrorKind::invalid_argument, "spec: must be a JSON object");
  const auto& o = spec.get_object();
  const auto* p = o.if_contains("prompt");
  if (!p || !p->is_string() || p->get_string().empty())
    throw_error(ErrorKind::invalid_argument, "prompt: required, a non-empty string");
  check_name(o, "name");
  check_name(o, "model");
  return o;
}

// A running record's stage name (the worker's status); none for "queued" or an empty one.
std::optional<std::string> stage_of(const std::string& s) {
  if (s.empty() || s == to_string(JobState::queued)) return std::nullopt;
  return s;
}

JobResult result_of(const FleetRecord& rec) {
  JobResult r;
  r.id = rec.id;
  r.state = rec.status == "done" ? JobState::done : rec.status == "cancelled" ? JobState::cancelled : JobState::failed;
  r.output = rec.output;
  r.content_type = rec.content_type;
  r.device = rec.worker.empty() ? rec.device : rec.worker + "/" + rec.device;
  r.seconds = rec.seconds;
  r.retries = std::max(0, rec.attempts - 1);
  if (r.state != JobState::done) {
    r.error = rec.error;
    for (auto k : {ErrorKind::invalid_argument, ErrorKind::not_found, ErrorKind::already_exists, ErrorKind::overloaded,
                   ErrorKind::cancelled, ErrorKind::deadline_exceeded, ErrorKind::transient, ErrorKind::out_of_memory,
                   ErrorKind::internal})
      if (to_string(k) == rec.error_kind) r.error_kind = k;
    if (!r.error_kind) r.error_kind = ErrorKind::internal;
  }
  return r;
}

}  // namespace

struct FleetClient::State : std::enable_shared_from_this<FleetClient::State> {
  explicit State(RuntimeConfig c)
      : config(std::move(c)), queue(config.queue), nats({.url = queue.url, .name = "vgen-front-end"}) {}

  RuntimeConfig config;
  QueueConfig queue;
  NatsClient nats;
  asio::thread_pool broker_pool{2};  // async_submit's round trips
  mutable Tracer tracer{1000};
  mutable std::mutex mutex;
  std::map<std::string, std::shared_ptr<detail::JobEntry>> entries;
  std::map<std::string, FleetRecord> records;  // the last record of each job, for list_jobs
  FleetClientStats stats;
  std::atomic<bool> caught_up{false};
  mutable std::condition_variable caught_up_changed;  // with mutex
  // Jobs seen to end (a final record): each frees a place in a full stream once its worker
  // acknowledges the message, so a blocked submit retries on it.
  std::uint64_t jobs_gone = 0;                // with mutex
  std::condition_variable jobs_gone_changed;  // with mutex
  std::uint64_t expected_at_start = 0, seen = 0;
  MetricsRegistry webhook_metrics;
  std::unique_ptr<Webhooks> webhooks;  // null without endpoints; before the watch, after the pool
  Subscription watch;
  // Watched jobs' videos relayed from their workers (api/fleet/live_relay.hpp), by job id; an
  // entry goes when its broadcast has ended and another job is watched.
  std::map<std::string, std::shared_ptr<LiveReplay>> replays;  // with mutex
  bool live_on = false;  // the live stream exists (set once at start)
  std::shared_ptr<LiveBudget> live_budget = std::make_shared<LiveBudget>(config.live_max_total_bytes);

  // The mirror of a job: a local Job whose cancel request goes to the worker.
  struct CancelToWorker final : Job::CancelTarget {
    std::weak_ptr<State> state;
    void interrupt(const std::shared_ptr<Job>& job) override {
      // Under the job's lock: only post.
      if (auto s = state.lock()) asio::post(s->broker_pool, [s, id = job->id()] { s->send_cancel(id); });
    }
  };
  CancelToWorker cancel_target;

  std::shared_ptr<detail::JobEntry> make_entry(const std::string& id, json::object spec) {
    auto entry = std::make_shared<detail::JobEntry>();
    entry->id = id;
    entry->job = std::make_shared<Job>(id, json::value(std::move(spec)));
    entry->job->set_cancel_target(&cancel_target);
    entry->job->subscribe([weak = std::weak_ptr<detail::JobEntry>(entry)](const JobEvent& e) {
      if (auto en = weak.lock()) en->emit(e);
    });
    return entry;
  }

  // On the watch thread: the record of a job, new or updated.
  void apply(const std::string& key, const std::string& text) {
    if (text.empty()) {  // deleted: a submission the broker refused
      std::lock_guard lock(mutex);
      if (auto it = entries.find(key); it != entries.end() && !it->second->final_result) entries.erase(it);
      records.erase(key);
      count_seen();  // a delete marker is one of the bucket's messages too
      return;        // not a job gone from the stream: a refused one never entered it
    }
    FleetRecord rec;
    try {
      rec = parse_fleet_record(text);
    } catch (const Error& e) {
      spdlog::warn("fleet: record {}: {}", key, e.what());
      return;
    }
    std::shared_ptr<detail::JobEntry> entry;
    {
      std::lock_guard lock(mutex);
      records[rec.id] = rec;
      auto& slot = entries[rec.id];
      if (!slot) slot = make_entry(rec.id, rec.spec);
      entry = slot;
      count_seen();
      if (is_final(rec)) count_gone();
    }
    auto& job = *entry->job;
    if (is_final(rec)) {
      announce(rec);
      return finish(*entry, rec);
    }
    if (rec.status == "running") {
      if (const auto st = stage_of(rec.stage)) {
        if (const auto snap = job.snapshot(); snap.state != JobState::running || snap.stage != *st) job.enter_stage(*st);
        const auto snap = job.snapshot();
        if (rec.total > 0 && (snap.step != rec.step || snap.total != rec.total)) job.report_progress(rec.step, rec.total);
      }
    }
  }

  // Under mutex: one more of the bucket's messages delivered.
  void count_seen() {
    if (caught_up || ++seen < expected_at_start) return;
    caught_up = true;
    caught_up_changed.notify_all();
  }

  // Under mutex.
  void count_gone() {
    ++jobs_gone;
    jobs_gone_changed.notify_all();
  }

  std::uint64_t gone_so_far() {
    std::lock_guard lock(mutex);
    return jobs_gone;
  }

  // Waits until a job has ended since `before` was read, or `backstop` has passed. A worker
  // writes a job's final record just before it acknowledges the message, so the retry the record
  // wakes can still find the stream full; and a message can leave the stream with no final record
  // (an operator's purge, a record expired). The backstop retries after those; an ending job
  // wakes the submit at once.
  void wait_for_room(std::uint64_t before, std::chrono::milliseconds backstop) {
    std::unique_lock lock(mutex);
    jobs_gone_changed.wait_for(lock, backstop, [&] { return jobs_gone != before; });
  }

  std::shared_ptr<LiveBroadcast> live_stream(const std::string& id) {
    auto entry = find(id);
    if (!live_on || !entry || entry->finished()) return nullptr;
    std::lock_guard lock(mutex);
    std::erase_if(replays, [](const auto& r) { return r.second->broadcast()->end() != LiveBroadcast::End::open; });
    auto& replay = replays[id];
    if (!replay)
      replay = LiveReplay::start(nats, queue, id, broker_pool.get_executor(), LiveBroadcast::default_max_bytes, live_budget);
    // finish() marks the job ended before it looks for replays: one that ended between the check
    // above and this replay's entry is seen here (else its replay would ask for a stream forever).
    if (entry->finished()) replay->job_ended();
    return replay->broadcast();
  }

  void finish(detail::JobEntry& entry, const FleetRecord& rec) {
    const auto r = result_of(rec);
    {
      std::lock_guard lock(entry.mutex);
      if (entry.final_result) return;
      entry.final_result = r;
      entry.ended_at = std::chrono::steady_clock::now();
    }
    {  // after the end is marked (see live_stream)
      std::lock_guard lock(mutex);
      if (auto it = replays.find(rec.id); it != replays.end()) it->second->job_ended();
    }
    // The job's terminal event reaches its listeners before wait() returns, as with the
    // in-process Runtime: a caller that waited has seen every event (api.fleet_client saw the
    // "done" event missing once when the promise came first).
    std::exception_ptr error;
    if (r.state != JobState::done) error = std::make_exception_ptr(Error(*r.error_kind, r.error));
    entry.job->set_cancel_target(nullptr);
    entry.job->finish(r.state, error);
    entry.promise.set_value(r);
    entry.ended.set();
  }

  // A final record's webhook event, if this front end submitted the job (a durable watch, so a
  // job that ended while this process was down is announced when the watch replays its record).
  // On the broker pool: the outbox fsyncs, and the watch thread must stay cheap.
  void announce(const FleetRecord& rec) {
    if (!webhooks) return;
    asio::post(broker_pool, [self = shared_from_this(), event = job_end_event(rec.id, result_of(rec).state)] {
      try {
        if (self->webhooks->record_watched(event) > 0) self->webhooks->wake();
      } catch (const std::exception& e) {
        spdlog::error("webhooks: could not record the end of {}: {}", event.subject_id, e.what());
      }
    });
  }

  void send_cancel(const std::string& id) {
    try {
      // A job still queued is cancelled by the worker that receives it; one running, by its worker.
      if (auto text = nats.kv_get(queue.bucket, id)) {
        auto rec = parse_fleet_record(*text);
        if (rec.status == "queued" && !rec.cancel_requested) {
          rec.cancel_requested = true;
          nats.kv_put(queue.bucket, id, json::serialize(to_json(rec)));
        }
      }
      nats.publish_core(cancel_subject(queue, id), "");
      nats.flush();
    } catch (const Error& e) {
      spdlog::warn("fleet: cancelling {}: {}", id, e.what());
    }
  }

  JobHandle submit_once(json::value spec, SubmitOptions o) {
    auto object = light_validate(spec);
    const auto id = o.id.empty() ? new_job_id() : o.id;
    if (!o.id.empty() && (find(id) || nats.kv_get(queue.bucket, id)))
      throw_error(ErrorKind::already_exists, "id: a job with id '" + id + "' already exists");
    if (!object.contains("name")) object["name"] = id;  // the output is named by job: a redelivery rewrites it
    FleetRecord rec;
    rec.id = id;
    rec.model = object.contains("model") ? std::string(object.at("model").as_string()) : "";
    rec.submitted_unix = unix_now();
    rec.spec = object;
    auto entry = make_entry(id, object);
    if (o.on_progress) entry->listeners.emplace(entry->next_listener++, o.on_progress);
    {
      std::lock_guard lock(mutex);
      entries[id] = entry;  // before the publish: the watch may report the worker at once
    }
    try {
      if (webhooks) webhooks->watch(id);  // durable before the job exists: its end is owed
      nats.kv_put(queue.bucket, id, json::serialize(to_json(rec)));
      nats.publish(job_subject(queue, rec.model), json::serialize(json::object{{"id", id}, {"spec", object}}));
    } catch (...) {
      {
        std::lock_guard lock(mutex);
        entries.erase(id);
        ++stats.rejected;
      }
      try {
        nats.kv_delete(queue.bucket, id);  // never acknowledged: no record stays
      } catch (const Error&) {
        // the broker is away: the queued record stays, with no message nothing runs it
      }
      try {
        if (webhooks) webhooks->unwatch(id);
      } catch (const Error& e) {
        spdlog::warn("webhooks: {}: {}", id, e.what());  // a watch with no job: nothing is ever sent for it
      }
      throw;
    }
    std::lock_guard lock(mutex);
    ++stats.submitted;
    return detail::make_job_handle(entry);
  }

  std::optional<JobHandle> find(const std::string& id) const {
    std::lock_guard lock(mutex);
    auto it = entries.find(id);
    if (it == entries.end()) return std::nullopt;
    return detail::make_job_handle(it->second);
  }
};

FleetClient::FleetClient(RuntimeConfig config) {
  if (config.queue.url.empty())
    throw_error(ErrorKind::invalid_argument, "queue: no URL (--queue nats://HOST:PORT or the config's queue.url)");
  state_ = std::make_shared<State>(std::move(config));
  auto& s = *state_;
  s.cancel_target.state = state_;
  s.nats.ensure_stream({.name = s.queue.stream, .subjects = {s.queue.subject_prefix + ".>"}, .max_msgs = s.queue.max_pending});
  s.nats.ensure_bucket(s.queue.bucket, s.queue.record_ttl);
  s.live_on = ensure_live_stream(s.nats, s.queue);  // a watched job's video comes through it
  s.expected_at_start = s.nats.stream_messages("KV_" + s.queue.bucket);  // an upper bound of the keys (history 1)
  if (s.expected_at_start == 0) s.caught_up = true;
  if (!s.config.webhooks.endpoints.empty()) {
    auto file = s.config.webhooks.outbox.empty() ? s.config.output_dir / ".vgen-webhooks.db" : s.config.webhooks.outbox;
    s.webhooks = std::make_unique<Webhooks>(s.config.webhooks, file, s.webhook_metrics);
    spdlog::info("webhooks: {} endpoint(s) for the jobs this front end submits, deliveries recorded in {}",
                 s.config.webhooks.endpoints.size(), file.string());
  }
  s.watch = s.nats.watch_bucket(s.queue.bucket, [weak = std::weak_ptr<State>(state_)](std::string key, std::string value) {
    if (auto st = weak.lock()) st->apply(key, value);
  });
}

FleetClient::~FleetClient() {
  state_->watch = Subscription();  // no more updates (drained: a running handler returns first)
  {
    std::lock_guard lock(state_->mutex);  // their asking timers end at their next tick: join below returns
    for (auto& [_, replay] : state_->replays) replay->broadcast()->finish(LiveBroadcast::End::failed);
  }
  state_->broker_pool.join();
  std::lock_guard lock(state_->mutex);
  for (auto& [_, entry] : state_->entries) entry->job->set_cancel_target(nullptr);  // handles outlive the client
}

JobHandle FleetClient::try_submit(json::value spec, SubmitOptions options) {
  return state_->submit_once(std::move(spec), std::move(options));
}

JobHandle FleetClient::submit(json::value spec, SubmitOptions options) {
  while (true) {
    const auto gone = state_->gone_so_far();  // read before the attempt: an end during it counts
    try {
      return state_->submit_once(spec, options);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::overloaded) throw;
    }
    state_->wait_for_room(gone, kSubmitBackstop);  // the stream is full: until a job ends
  }
}

asio::awaitable<JobHandle> FleetClient::async_submit(json::value spec, SubmitOptions options) {
  auto back = co_await asio::this_coro::executor;
  co_await asio::post(state_->broker_pool, asio::use_awaitable);  // the round trip off the io thread
  std::exception_ptr error;
  JobHandle handle;
  try {
    handle = state_->submit_once(std::move(spec), std::move(options));
  } catch (...) {
    error = std::current_exception();
  }
  co_await asio::post(back, asio::use_awaitable);
  if (error) std::rethrow_exception(error);
  co_return handle;
}

std::optional<JobHandle> FleetClient::find(const std::string& id) const { return state_->find(id); }

std::shared_ptr<LiveBroadcast> FleetClient::live_stream(const std::string& id) const { return state_->live_stream(id); }

JobSpec FleetClient::validate(const json::value& spec) const {
  light_validate(spec);
  return parse_job_spec(spec, JobSpec{}, SpecLimits{});
}

JobSpec FleetClient::admit(json::value& spec) const {
  auto parsed = validate(spec);
  admit_images(spec, parsed, config().images);
  admit_video(spec, parsed, config().videos);
  set_output_shape(parsed, 0, 1);  // an extend's length: its worker's package knows the overlap
  return parsed;
}

std::vector<JobHandle> FleetClient::unfinished() const {
  std::vector<JobHandle> out;
  std::lock_guard lock(state_->mutex);
  for (const auto& [_, entry] : state_->entries) {
    std::lock_guard entry_lock(entry->mutex);
    if (!entry->final_result) out.push_back(detail::make_job_handle(entry));
  }
  return out;
}

JobPage FleetClient::list_jobs(const JobListQuery& query) const {
  std::vector<JobRecord> all;
  {
    std::lock_guard lock(state_->mutex);
    for (auto it = state_->records.rbegin(); it != state_->records.rend(); ++it) {  // UUIDv7: newest first
      const auto& r = it->second;
      if (!query.status.empty() && r.status != query.status) continue;
      JobRecord j;
      j.id = r.id;
      j.spec = r.spec;
      j.status = r.status;
      j.output = r.output;
      j.content_type = r.content_type;
      j.error_kind = r.error_kind;
      j.error = r.error;
      j.seconds = r.seconds;
      j.attempts = r.attempts;
      j.step = r.step;
      j.total = r.total;
      j.finished_unix = r.finished_unix;
      all.push_back(std::move(j));
    }
  }
  // The cursor is an offset into that order (the records change under it: a page may repeat or skip one).
  const auto from = std::min<std::size_t>(query.before, all.size());
  const auto n = std::max<std::size_t>(1, query.limit);
  JobPage page;
  for (auto i = from; i < all.size() && page.jobs.size() < n; ++i) page.jobs.push_back(std::move(all[i]));
  if (from + page.jobs.size() < all.size()) page.next = from + page.jobs.size();
  return page;
}

bool FleetClient::previews(const std::string&) const { return false; }

asio::any_io_executor FleetClient::executor() const { return state_->broker_pool.get_executor(); }

Tracer& FleetClient::tracer() const { return state_->tracer; }

bool FleetClient::cancel(const std::string& id, std::string reason) {
  auto job = state_->find(id);
  return job && job->cancel(std::move(reason));
}

const RuntimeConfig& FleetClient::config() const { return state_->config; }

FleetClientStats FleetClient::stats() const {
  std::lock_guard lock(state_->mutex);
  auto out = state_->stats;
  out.known_jobs = state_->entries.size();
  return out;
}

bool FleetClient::caught_up() const { return state_->caught_up; }

bool FleetClient::wait_caught_up(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(state_->mutex);
  return state_->caught_up_changed.wait_for(lock, timeout, [&] { return state_->caught_up.load(); });
}

bool FleetClient::has_output(const json::value& spec, const std::filesystem::path& path) const {
  namespace fs = std::filesystem;
  if (!wait_caught_up(std::chrono::seconds(5)))
    spdlog::warn("fleet: the job records are still arriving: {} may be rendered again", path.filename().string());
  std::optional<FleetRecord> newest;
  {
    std::lock_guard lock(state_->mutex);
    for (const auto& [_, r] : state_->records)
      if (r.status == "done" && !r.key.empty() && fs::path(r.output).filename() == path.filename() &&
          json::value(r.spec) == spec && (!newest || r.finished_unix > newest->finished_unix))
        newest = r;
  }
  if (!newest) return false;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return true;  // png frames: a folder, as the local rule takes it
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) != newest->output_bytes || ec) return false;
  const auto ext = path.extension();
  if (ext != ".mp4" && ext != ".webm") return true;  // no tag to check: the size the worker recorded
  try {
    return probe_video(path).comment == "vgen:" + newest->key;
  } catch (const Error&) {
    return false;
  }
}

std::string FleetClient::metrics_text() const {
  const auto s = stats();
  std::string out;
  out += "# HELP vgen_fleet_submitted_total Jobs this front end put on the queue\n# TYPE vgen_fleet_submitted_total counter\n";
  out += "vgen_fleet_submitted_total " + std::to_string(s.submitted) + "\n";
  out += "# HELP vgen_fleet_rejected_total Submissions the broker refused (queue full or away)\n# TYPE vgen_fleet_rejected_total counter\n";
  out += "vgen_fleet_rejected_total " + std::to_string(s.rejected) + "\n";
  out += "# HELP vgen_fleet_known_jobs Job records this front end follows\n# TYPE vgen_fleet_known_jobs gauge\n";
  out += "vgen_fleet_known_jobs " + std::to_string(s.known_jobs) + "\n";
  if (state_->webhooks) out += state_->webhook_metrics.render_prometheus();
  return out;
}

}  // namespace vgen
