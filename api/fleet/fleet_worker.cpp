#include "api/fleet/fleet_worker.hpp"

#include "api/fleet/live_relay.hpp"
#include "api/fleet/nats_client.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace vgen {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string default_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + "-" + std::to_string(getpid());
}

std::chrono::milliseconds heartbeat_of(const QueueConfig& q) {
  auto shortest = q.ack_wait;
  for (auto b : q.backoff) shortest = std::min(shortest, b);
  return std::max(std::chrono::milliseconds(100), shortest / 3);
}

}  // namespace

std::vector<std::string> model_names(const RuntimeConfig& config) {
  std::vector<std::string> out;
  auto dir = config.model.empty() ? default_model_dir() : config.model;
  dir = dir.lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  out.push_back(dir.filename().string());
  for (const auto& [name, _] : config.models) out.push_back(name);
  return out;
}

// One job this worker holds: its message (unacked until the record says how it ended).
struct HeldJob {
  NatsMessage msg;
  FleetRecord rec;
  JobHandle handle;
  bool suspect = false;
  bool cancel_requested = false;
};

struct FleetWorker::State : std::enable_shared_from_this<FleetWorker::State> {
  State(Runtime& rt, FleetWorkerOptions o)
      : runtime(rt), options(std::move(o)), queue(rt.config().queue),
        nats({.url = queue.url, .name = "vgen-worker " + options.name}) {}

  Runtime& runtime;
  FleetWorkerOptions options;
  QueueConfig queue;
  NatsClient nats;

  mutable std::mutex mutex;
  std::condition_variable changed;  // room, `alone`, held jobs, completions, stopping
  std::map<std::string, std::shared_ptr<HeldJob>> held;
  std::size_t reserved = 0;  // held + fetched but not yet held
  std::size_t running = 0;   // submitted to the Runtime, not completed
  bool alone = false;        // a suspect runs: nothing else starts
  bool stopping = false, finish_held = true, completer_stop = false;
  std::deque<std::pair<std::string, JobResult>> completions;
  FleetWorkerStats stats;
  std::map<std::string, PullSubscription> subscriptions;  // by model; outlive the pull threads
  std::vector<std::thread> pullers;
  std::thread completer;
  Subscription cancels;
  LiveRelay live_relay{nats, queue, options.name};  // the videos of held jobs a front end watches
  Subscription wants;
  bool started = false, stopped = false;

  void ensure_queue() {
    nats.ensure_stream({.name = queue.stream, .subjects = {queue.subject_prefix + ".>"}, .max_msgs = queue.max_pending});
    nats.ensure_bucket(queue.bucket, queue.record_ttl);
    for (const auto& m : options.models)
      nats.ensure_consumer({.stream = queue.stream, .durable = consumer_name(queue, m), .filter = job_subject(queue, m),
                            .ack_wait = queue.ack_wait, .backoff = queue.backoff, .max_ack_pending = 100000});
  }

  void put(const FleetRecord& rec) { nats.kv_put(queue.bucket, rec.id, json::serialize(to_json(rec))); }

  void release(std::size_t n) {
    {
      std::lock_guard lock(mutex);
      reserved -= n;
    }
    changed.notify_all();
  }

  // ---- the pull threads ----

  // One thread per model. It holds room only for a fetch of what is waiting (fetch_now, ~100 ms); its
  // long poll for the next job holds none, so the long poll of a model with no jobs never keeps
  // the other models' jobs waiting (it did, up to fetch_wait per job: every worker pulls its
  // model's subject and "default"). A job that a long poll brings after the other threads
  // filled the room is held (in-progress acked) until a running job ends: at most one beyond
  // the capacity per model.
  void pull_loop(const std::string& model) {
    // The State keeps the subscription: a message's ack goes through it, after this thread ends.
    PullSubscription& sub = subscriptions.at(model);
    bool subscribed = false;
    const auto consumer = consumer_name(queue, model), subject = job_subject(queue, model);
    while (true) {
      std::size_t room = 0;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return stopping || (reserved < options.capacity && !alone); });
        if (stopping) return;
        room = options.capacity - reserved;
        reserved += room;
      }
      std::vector<NatsMessage> got;
      try {
        if (!subscribed) {
          sub = nats.pull_subscribe(queue.stream, consumer, subject);
          subscribed = true;
        }
        got = sub.fetch_now(static_cast<int>(room));
        if (got.empty()) {
          release(std::exchange(room, 0));
          got = sub.fetch(1, queue.fetch_wait);  // the long poll, holding no room
          std::lock_guard lock(mutex);
          reserved += got.size();
        }
      } catch (const Error& e) {
        release(room);
        spdlog::warn("worker {}: pulling {}: {}", options.name, subject, e.what());
        std::unique_lock lock(mutex);
        changed.wait_for(lock, std::chrono::milliseconds(500), [&] { return stopping; });  // the broker is away
        continue;
      }
      if (room) release(room - got.size());
      for (auto& m : got) accept(std::move(m));
    }
  }

  // A fetched job: done already, quarantined, or run (alone when suspect). Each path ends with
  // the message acked, termed, naked or held, and its reservation released or kept.
  void accept(NatsMessage m) {
    const auto deliveries = m.deliveries();
    {
      std::lock_guard lock(mutex);
      ++stats.received;
      if (deliveries > 1) ++stats.redelivered;
    }
    std::string id;
    json::object spec;
    try {
      auto v = json::parse(m.data());
      id = std::string(v.at("id").as_string());
      spec = v.at("spec").as_object();
    } catch (const std::exception& e) {
      spdlog::error("worker {}: not a job message on {} ({}): terminated", options.name, m.subject(), e.what());
      m.term();
      return release(1);
    }
    FleetRecord rec;
    try {
      if (auto text = nats.kv_get(queue.bucket, id)) rec = parse_fleet_record(*text);
    } catch (const Error& e) {
      spdlog::warn("worker {}: record of {}: {}: handed back", options.name, id, e.what());
      m.nak(std::chrono::seconds(1));
      return release(1);
    }
    if (rec.id.empty()) {  // published without a record (not through a FleetClient)
      rec.id = id;
      rec.submitted_unix = unix_now();
    }
    rec.spec = spec;
    if (is_final(rec) && (rec.status != "done" || fs::exists(rec.output))) {
      if (rec.status == "done") {
        std::lock_guard lock(mutex);
        ++stats.already_done;
      }
      m.ack();  // its worker recorded the end and died before acking: nothing to do again
      return release(1);
    }
    const int crashes = std::max<int>(0, static_cast<int>(deliveries) - 1 - rec.returned);
    if (crashes >= queue.max_crashes) return quarantine(std::move(m), std::move(rec), crashes);
    auto job = std::make_shared<HeldJob>();
    job->msg = std::move(m);
    job->suspect = crashes > 0;
    job->cancel_requested = rec.cancel_requested;
    job->rec = std::move(rec);
    {
      std::unique_lock lock(mutex);
      if (held.count(id)) {  // a second delivery of a job still running here: keep the newest ack token
        held[id]->msg = std::move(job->msg);
        lock.unlock();
        return release(1);
      }
      held.emplace(id, job);  // in-progress acks cover it from now on
      changed.wait(lock, [&] {
        return stopping || (!alone && running < options.capacity && (!job->suspect || running == 0));
      });
      if (stopping) {
        held.erase(id);
        lock.unlock();
        job->msg.nak();
        return release(1);
      }
      if (job->suspect) alone = true;
      ++running;
    }
    run(id, job);
  }

  void quarantine(NatsMessage m, FleetRecord rec, int crashes) {
    rec.status = "failed";
    rec.stage.clear();
    rec.error_kind = std::string(to_string(ErrorKind::internal));
    rec.error = "crashed the worker " + std::to_string(crashes) + " times: quarantined (failed, not run again)";
    rec.finished_unix = unix_now();
    spdlog::error("worker {}: job {} {}", options.name, rec.id, rec.error);
    try {
      put(rec);
    } catch (const Error& e) {
      spdlog::warn("worker {}: record of {}: {}: handed back", options.name, rec.id, e.what());
      m.nak(std::chrono::seconds(1));
      return release(1);
    }
    m.term();
    {
      std::lock_guard lock(mutex);
      ++stats.quarantined;
      ++stats.failed;
    }
    release(1);
  }

  void run(const std::string& id, const std::shared_ptr<HeldJob>& job) {
    auto& rec = job->rec;
    if (job->cancel_requested) return complete_now(id, JobState::cancelled, ErrorKind::cancelled, "cancelled by request");
    rec.status = "running";
    rec.worker = options.name;
    rec.stage.clear();
    rec.step = rec.total = 0;
    rec.error_kind.clear();
    rec.error.clear();
    ++rec.attempts;
    spdlog::info("worker {}: running job {} (attempt {})", options.name, id, rec.attempts);
    try {
      put(rec);  // the claim: a crash from here on counts against the job
      auto self = shared_from_this();
      SubmitOptions o;
      o.on_progress = [weak = std::weak_ptr<State>(self), id](const JobEvent& e) {
        if (auto s = weak.lock()) s->progress(id, e);
      };
      auto handle = runtime.submit(json::value(rec.spec), std::move(o));
      {
        std::lock_guard lock(mutex);
        job->handle = handle;
      }
      if (job->cancel_requested) handle.cancel("cancelled by request");
      asio::co_spawn(runtime.executor(), wait_for(self, id, handle), asio::detached);
    } catch (...) {
      const auto e = std::current_exception();
      complete_now(id, JobState::failed, classify(e), describe(e));
    }
  }

  static asio::awaitable<void> wait_for(std::shared_ptr<State> self, std::string id, JobHandle handle) {
    JobResult r = co_await handle.async_wait();
    {
      std::lock_guard lock(self->mutex);
      self->completions.emplace_back(std::move(id), std::move(r));
    }
    self->changed.notify_all();
  }

  // The content key a done job's output is tagged with (empty if the spec no longer parses).
  std::string output_key(const JobResult& r) const {
    try {
      return runtime.content_key(r.spec);
    } catch (const Error&) {
      return {};
    }
  }

  void complete_now(const std::string& id, JobState state, ErrorKind kind, std::string error) {
    JobResult r;
    r.id = id;
    r.state = state;
    r.error_kind = kind;
    r.error = std::move(error);
    {
      std::lock_guard lock(mutex);
      completions.emplace_back(id, std::move(r));
    }
    changed.notify_all();
  }

  // On the thread making the transition: a put that does not wait.
  void progress(const std::string& id, const JobEvent& e) {
    if (is_terminal(e.state)) return;
    std::string text;
    {
      std::lock_guard lock(mutex);
      auto it = held.find(id);
      if (it == held.end()) return;
      auto& rec = it->second->rec;
      rec.stage = std::string(e.status());
      rec.step = e.step;
      rec.total = e.total;
      text = json::serialize(to_json(rec));
    }
    try {
      nats.kv_put_nowait(queue.bucket, id, text);
    } catch (const Error&) {
      // progress is advisory; the final record is written with an ack
    }
  }

  // ---- the completion thread: records, acks, in-progress acks ----

  void completion_loop() {
    const auto beat = heartbeat_of(queue);
    auto next_beat = std::chrono::steady_clock::now() + beat;
    std::unique_lock lock(mutex);
    while (true) {
      changed.wait_until(lock, next_beat, [&] { return !completions.empty() || (completer_stop && held.empty()); });
      if (std::chrono::steady_clock::now() >= next_beat) {
        for (auto& [_, job] : held) job->msg.in_progress();  // queued bytes only: no wait under the lock
        next_beat = std::chrono::steady_clock::now() + beat;
      }
      while (!completions.empty()) {
        auto [id, r] = std::move(completions.front());
        completions.pop_front();
        lock.unlock();
        finish(id, r);
        lock.lock();
      }
      if (completer_stop && held.empty()) return;
    }
  }

  void finish(const std::string& id, const JobResult& r) {
    std::shared_ptr<HeldJob> job;
    {
      std::lock_guard lock(mutex);
      job = held.at(id);
    }
    auto& rec = job->rec;
    bool give_back = false;
    std::uint64_t FleetWorkerStats::*count = &FleetWorkerStats::failed;
    {
      std::lock_guard lock(mutex);
      rec.stage.clear();
      rec.seconds = r.seconds;
      if (r.state == JobState::done) {
        rec.status = "done";
        rec.output = r.output.string();
        rec.content_type = r.content_type;
        rec.device = r.device;
        rec.key = output_key(r);
        std::error_code ec;
        const auto bytes = fs::file_size(r.output, ec);
        rec.output_bytes = ec ? 0 : bytes;
        if (++rec.writes > 1) ++stats.rewrites;
        count = &FleetWorkerStats::done;
      } else if (r.state == JobState::cancelled && !job->cancel_requested && stopping && !finish_held) {
        rec.status = "queued";  // handed back: another worker runs it, and this was no crash
        ++rec.returned;
        give_back = true;
        count = &FleetWorkerStats::returned;
      } else {
        rec.status = r.state == JobState::cancelled ? "cancelled" : "failed";
        rec.error_kind = std::string(to_string(r.error_kind.value_or(ErrorKind::internal)));
        rec.error = r.error;
        if (r.state == JobState::cancelled) count = &FleetWorkerStats::cancelled;
      }
      if (!give_back) rec.finished_unix = unix_now();
    }
    try {
      put(rec);
      if (give_back) job->msg.nak();
      else job->msg.ack();
    } catch (const Error& e) {
      // Not recorded: leave it unacked, the broker redelivers it and a worker writes it again.
      spdlog::error("worker {}: recording the end of {}: {}", options.name, id, e.what());
      job->msg.nak(std::chrono::seconds(1));
    }
    spdlog::info("worker {}: finished job {}: {}", options.name, id, rec.status);
    {
      std::lock_guard lock(mutex);
      ++(stats.*count);
      held.erase(id);
      --running;
      --reserved;
      if (job->suspect) alone = false;
    }
    changed.notify_all();
  }

  // On a nats.c thread: a front end watches a job. Only its holder relays it, and only a job in
  // the Runtime already (a want before that is asked again: the front end repeats it).
  void on_want(const std::string& subject) {
    const auto id = subject.substr(subject.rfind('.') + 1);
    JobHandle handle;
    {
      std::lock_guard lock(mutex);
      auto it = held.find(id);
      if (it == held.end() || !it->second->handle) return;
      handle = it->second->handle;
    }
    // The Runtime knows the job by its own id; the broker's subjects by the fleet's.
    if (auto live = runtime.live_stream(handle.id())) live_relay.relay(id, std::move(live));
  }

  void on_cancel(const std::string& subject) {
    const auto id = subject.substr(subject.rfind('.') + 1);
    JobHandle handle;
    {
      std::lock_guard lock(mutex);
      auto it = held.find(id);
      if (it == held.end()) return;
      it->second->cancel_requested = true;
      handle = it->second->handle;
    }
    if (handle) handle.cancel("cancelled by request");
  }
};

FleetWorker::FleetWorker(Runtime& runtime, FleetWorkerOptions options) {
  if (runtime.config().queue.url.empty())
    throw_error(ErrorKind::invalid_argument, "queue: no URL (--queue nats://HOST:PORT or the config's queue.url)");
  if (options.name.empty()) options.name = default_name();
  if (options.capacity == 0) options.capacity = std::max<std::size_t>(1, runtime.config().batching.max_batch);
  if (options.models.empty()) {
    options.models = model_names(runtime.config());
    options.models.insert(options.models.begin(), "default");
  }
  for (auto& m : options.models) m = subject_token(m);
  std::sort(options.models.begin(), options.models.end());
  options.models.erase(std::unique(options.models.begin(), options.models.end()), options.models.end());
  state_ = std::make_shared<State>(runtime, std::move(options));
  state_->ensure_queue();
}

FleetWorker::~FleetWorker() { stop(false); }

void FleetWorker::start() {
  auto s = state_;
  std::lock_guard lock(s->mutex);
  if (s->started) return;
  s->started = true;
  s->cancels = s->nats.subscribe(s->queue.cancel_subject + ".*", [weak = std::weak_ptr<State>(s)](std::string subject, std::string) {
    if (auto st = weak.lock()) st->on_cancel(subject);
  });
  s->wants = s->nats.subscribe(live_want_subject(s->queue, "*"), [weak = std::weak_ptr<State>(s)](std::string subject, std::string) {
    if (auto st = weak.lock()) st->on_want(subject);
  });
  s->completer = std::thread([s] { s->completion_loop(); });
  for (const auto& m : s->options.models) s->subscriptions[m];
  for (const auto& m : s->options.models) s->pullers.emplace_back([s, m] { s->pull_loop(m); });
  spdlog::info("worker {}: pulling {} job(s) at a time from {} ({})", s->options.name, s->options.capacity,
               s->queue.url, s->options.models.size());
}

void FleetWorker::stop(bool finish_held) {
  auto s = state_;
  {
    std::lock_guard lock(s->mutex);
    if (s->stopped) return;
    s->stopped = true;
    s->stopping = true;
    s->finish_held = finish_held;
  }
  s->changed.notify_all();
  for (auto& t : s->pullers) t.join();  // each returns within one fetch wait
  if (!finish_held) {
    std::vector<JobHandle> handles;
    {
      std::lock_guard lock(s->mutex);
      for (auto& [_, job] : s->held)
        if (job->handle) handles.push_back(job->handle);
    }
    for (auto& h : handles) h.cancel("the worker is stopping: handed back to the queue");
  }
  {
    std::lock_guard lock(s->mutex);
    s->completer_stop = true;
  }
  s->changed.notify_all();
  if (s->completer.joinable()) s->completer.join();
  s->cancels = Subscription();
  s->wants = Subscription();
  s->live_relay.stop();
  try {
    s->nats.flush();
  } catch (const Error& e) {
    spdlog::warn("worker {}: {}", s->options.name, e.what());
  }
}

FleetWorkerStats FleetWorker::stats() const {
  std::lock_guard lock(state_->mutex);
  auto out = state_->stats;
  out.held = state_->held.size();
  return out;
}

const std::string& FleetWorker::name() const { return state_->options.name; }
const std::vector<std::string>& FleetWorker::models() const { return state_->options.models; }

}  // namespace vgen
