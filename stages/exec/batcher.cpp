#include "stages/exec/batcher.hpp"

#include "runtime/errors.hpp"
#include "runtime/trace.hpp"
#include "stages/exec/denoise_loop.hpp"
#include "stages/model/model_backend.hpp"

#include <ATen/ATen.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

namespace vgen {

namespace asio = boost::asio;

namespace {
BatcherOptions at_least_one(BatcherOptions o) {
  o.batching.max_batch = std::max<std::size_t>(o.batching.max_batch, 1);  // 0 (kAuto, never tuned): alone
  return o;
}
}  // namespace

Batcher::Batcher(BatcherOptions options) : options_(at_least_one(std::move(options))), max_batch_(options_.batching.max_batch) {
  if (!options_.executor || !options_.devices) throw_error(ErrorKind::internal, "Batcher needs an executor and a device pool");
}

std::vector<Batcher::Member*> live_members(Batcher::Group& group) {
  std::vector<Batcher::Member*> live;
  for (auto& m : group.members) {
    m.dropped = m.job->cancel_requested();
    if (!m.dropped) live.push_back(&m);
  }
  return live;
}

std::size_t Batcher::cap_for(BatchKind kind) const noexcept {
  const auto decode = options_.batching.max_decode_batch;
  return kind == BatchKind::decode && decode > 0 ? std::min(max_batch(), decode) : max_batch();
}

asio::awaitable<void> Batcher::join(std::shared_ptr<Family> family, Job& job, BatchKind kind) {
  Member self;
  self.job = job.shared_from_this();
  self.work = family_job(job);
  std::string key = std::string(to_string(kind)) + "|";
  std::string base_key;
  auto outcome = self.outcome;
  if (kind == BatchKind::denoise) {
    self.scheduler = family->make_scheduler(*self.work);
    key += family->denoise_key(*self.work, *self.scheduler);
    base_key = key;
    if (self.work->state.step > 0) key += "|from step " + std::to_string(self.work->state.step);
    // A running group of the same loop takes it at its next step boundary if it has room.
    if (join_running(base_key, self, outcome)) {
      co_await await_outcome(job, outcome);  // cancellable: the pipeline stops waiting, the group drops it
      co_return;
    }
  } else if (kind == BatchKind::decode) {
    key += family->decode_key(*self.work);
  } else {
    key += family->prepare_key(*self.work);
  }

  std::shared_ptr<Group> group;
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    // After an out-of-memory error this key's groups are capped (halved each time, down to 1).
    const auto cap = caps_.count(key) ? std::min(caps_[key], cap_for(kind)) : cap_for(kind);
    auto& slot = open_[key];
    if (!slot) {
      slot = std::make_shared<Group>();
      slot->key = key;
      slot->base_key = base_key;
      slot->cap = std::max<std::size_t>(cap, 1);
      slot->kind = kind;
      slot->family = std::move(family);
      slot->strand = asio::make_strand(options_.executor->get_executor());
      first = true;
    }
    group = slot;
    group->members.push_back(std::move(self));
    if (!group->closed && group->members.size() >= std::max<std::size_t>(cap, 1)) {
      group->closed = true;
      open_.erase(key);
      waiting_[key].push_back(group);  // until placed: it may take in later groups' jobs then
      group->full.set();
    }
  }
  // On a strand of its own: collect() races an event against a timer with ||, whose
  // cancellation must not run on two threads at once (ThreadSanitizer, runtime/wait_list.hpp).
  if (first) asio::co_spawn(group->strand, run_group(group), asio::detached);
  co_await await_outcome(job, std::move(outcome));  // cancellable: the pipeline stops waiting, the group goes on
}

asio::awaitable<void> Batcher::await_outcome(Job& job, std::shared_ptr<Outcome> outcome) {
  co_await outcome->done.wait();
  if (outcome->error) std::rethrow_exception(outcome->error);
  job.throw_if_cancelled();
  if (outcome->preempted) job.request_requeue();  // back into the stage's queue, to go on later
}

void Batcher::set_waiting_probe(WaitingProbe probe) {
  auto p = probe ? std::make_shared<const WaitingProbe>(std::move(probe)) : nullptr;
  std::lock_guard lock(mutex_);
  probe_ = std::move(p);
}

std::shared_ptr<const Batcher::WaitingProbe> Batcher::waiting_probe() const {
  std::lock_guard lock(mutex_);
  return probe_;
}

void Batcher::count_preemption() {
  std::lock_guard lock(mutex_);
  ++preemptions_;
}

std::uint64_t Batcher::preemptions() const {
  std::lock_guard lock(mutex_);
  return preemptions_;
}

bool Batcher::join_running(const std::string& base_key, Member& self, std::shared_ptr<Outcome>& outcome) {
  if (!options_.batching.join_running) return false;  // the next group takes it
  std::lock_guard lock(mutex_);
  const auto it = running_.find(base_key);
  if (it == running_.end()) return false;
  auto& group = *it->second;
  std::lock_guard joins(group.joins);
  const auto cap = std::min(group.cap, caps_.count(group.key) ? caps_[group.key] : group.cap);
  if (!group.accepting || group.active >= cap) return false;
  if (options_.devices->waiting() > 0) return false;  // others wait for a device: let this group drain
  outcome = self.outcome;
  group.pending.push_back(std::move(self));
  ++group.active;
  return true;
}

// The device of a running denoise group of the same model, if any: no lease (that group's
// covers the device); the work runs on its compute thread between the group's steps.
std::optional<Placement> Batcher::borrow(const Group& group) {
  const auto prefix = "denoise|" + group.family->key_prefix() + "|";
  std::lock_guard lock(mutex_);
  for (const auto& [key, running] : running_)
    if (key.rfind(prefix, 0) == 0 && running->pool) {
      Placement p;
      p.device = running->device;
      p.pool = running->pool;
      return p;
    }
  return std::nullopt;
}

// The group takes no more joiners; its loop has ended (or never started).
void Batcher::stop_running(Group& group) {
  std::lock_guard lock(mutex_);
  if (auto it = running_.find(group.base_key); it != running_.end() && it->second.get() == &group) running_.erase(it);
  std::lock_guard joins(group.joins);
  group.accepting = false;
}

void Batcher::close(Group& group) {
  std::lock_guard lock(mutex_);
  if (auto w = waiting_.find(group.key); w != waiting_.end()) {
    std::erase_if(w->second, [&](const auto& g) { return g.get() == &group; });
    if (w->second.empty()) waiting_.erase(w);
  }
  if (group.closed) return;
  group.closed = true;
  if (auto it = open_.find(group.key); it != open_.end() && it->second.get() == &group) open_.erase(it);
}

// Placed: the group takes no more joiners, after taking in the members of later groups of its
// key that still wait for a device, up to the cap now in force (set_max_batch may have raised
// it since they formed). Those groups end empty when their turn comes.
void Batcher::close_taking_waiting(Group& group) {
  std::vector<std::shared_ptr<Group>> emptied;
  {
    std::lock_guard lock(mutex_);
    const auto cap = std::max<std::size_t>(1, caps_.count(group.key) ? std::min(caps_[group.key], cap_for(group.kind)) : cap_for(group.kind));
    auto w = waiting_.find(group.key);
    // Only when every acquire still queued is one of these groups': jobs of another key (or
    // higher priority) waiting for the device must not be overtaken (join_running's rule too).
    std::size_t same_key = 0;
    if (w != waiting_.end())
      for (const auto& other : w->second) same_key += other.get() != &group && !other->members.empty();
    if (w != waiting_.end() && options_.devices->waiting() <= same_key)
      for (auto& other : w->second) {
        if (other.get() == &group) continue;
        const bool had = !other->members.empty();
        while (group.members.size() < cap && !other->members.empty()) {
          group.members.push_back(std::move(other->members.front()));
          other->members.erase(other->members.begin());
        }
        if (had && other->members.empty()) emptied.push_back(other);
      }
    group.cap = std::max(group.cap, cap);  // running, it admits joiners up to the cap in force
  }
  close(group);
  // Their acquires leave the device's queue now, not when their turn comes (the cancellation is
  // emitted on the strand its acquire was started on; one not started yet sees it has no jobs).
  for (auto& other : emptied)
    asio::post(other->strand, [other] { other->unplace.emit(asio::cancellation_type::terminal); });
}

// Until the group is full (the joiner that fills it sets `full`) or `wait` has passed.
asio::awaitable<void> Batcher::collect(Group& group) {
  using namespace asio::experimental::awaitable_operators;
  if (group.full.is_set() || options_.batching.wait.count() <= 0) co_return;
  asio::steady_timer timer(co_await asio::this_coro::executor, options_.batching.wait);
  auto token = asio::as_tuple(asio::use_awaitable);
  co_await (group.full.wait(token) || timer.async_wait(token));
}

// nullopt: the group was emptied (by close_taking_waiting) before or while it waited.
asio::awaitable<std::optional<Placement>> Batcher::place(Group& group) {
  PlacementRequest req;
  req.model = group.family->package().id();
  {
    std::lock_guard lock(mutex_);
    if (group.members.empty()) co_return std::nullopt;
  }
  // No suspension between the check and the acquire's start: a cancellation posted to this
  // strand after the check runs after the acquire is queued.
  auto [ec, lease] = co_await options_.devices->acquire(
      req, asio::bind_cancellation_slot(group.unplace.slot(), asio::as_tuple(asio::use_awaitable)));
  if (ec) {
    std::lock_guard lock(mutex_);
    if (ec == asio::error::operation_aborted && group.members.empty()) co_return std::nullopt;
    throw boost::system::system_error(ec);
  }
  Placement p;
  p.lease = std::move(lease);
  p.device = p.lease.device().id;
  p.pool = &options_.executor->pool(device_pool_name(p.device));
  co_return p;
}

void Batcher::record_size(const Group& group) {
  {
    std::lock_guard lock(mutex_);
    ++sizes_[{group.kind, group.members.size()}];
    log_.emplace_back(group.key, group.members.size());
  }
  if (options_.metrics)
    options_.metrics
        ->histogram("vgen_batch_size", "Jobs per cross-job batched call group", {{"stage", std::string(to_string(group.kind))}},
                    {1, 2, 4, 8, 16, 32, 64, 128, 256})
        .observe(static_cast<double>(group.members.size()));
}

asio::awaitable<void> Batcher::run_group(std::shared_ptr<Group> group) {
  try {
    co_await collect(*group);
    // Then take the device, still collecting: while the device is busy with other work,
    // jobs that arrive join this group instead of queueing behind it in groups of their own
    // (as a dynamic batcher forms its batch when a model instance frees up). A free device
    // is granted at once, so this adds no wait.
    std::optional<Placement> placement = group->kind == BatchKind::denoise ? std::nullopt : borrow(*group);
    if (!placement) placement = co_await place(*group);
    if (!placement) {  // emptied while it waited: its acquire is gone, nothing to run
      close(*group);
      group->done.set();
      co_return;
    }
    close_taking_waiting(*group);
    if (group->members.empty()) {  // an earlier group of its key took its jobs in
      group->done.set();
      co_return;
    }
    record_size(*group);
    if (group->kind == BatchKind::denoise) {  // from now on compatible jobs join it running
      std::lock_guard lock(mutex_);
      std::lock_guard joins(group->joins);
      group->accepting = true;
      group->active = group->members.size();
      group->device = placement->device;
      group->pool = placement->pool;
      running_[group->base_key] = group;
    }
    std::vector<std::string> out_of_memory_on;
    for (;;) {
      std::exception_ptr failure;
      try {
        co_await run_work(*group, *placement);
      } catch (...) {
        failure = std::current_exception();
      }
      if (!failure) break;
      if (classify(failure) != ErrorKind::out_of_memory) std::rethrow_exception(failure);
      out_of_memory_on.push_back(placement->device);
      placement.reset();  // the lease goes back before another is asked for
      placement = place_elsewhere(*group, out_of_memory_on);
      if (!placement) std::rethrow_exception(failure);  // no device with room: shrink instead
    }
  } catch (...) {
    close(*group);  // a group that failed before it closed takes no more jobs
    group->error = std::current_exception();
    if (classify(group->error) == ErrorKind::out_of_memory && group->members.size() > 1) {
      const auto cap = std::max<std::size_t>(1, group->members.size() / 2);  // the retry runs smaller
      {
        std::lock_guard lock(mutex_);
        caps_[group->key] = cap;
      }
      if (options_.on_capped) options_.on_capped(group->key, cap);
    }
  }
  stop_running(*group);
  // Members that have not left yet (and joiners never admitted) end with the group.
  for (auto& m : group->members)
    if (!m.outcome->done.is_set()) {
      m.outcome->error = group->error;
      m.outcome->done.set();
    }
  for (auto& m : group->pending) {
    m.outcome->error = group->error ? group->error : std::make_exception_ptr(Error(ErrorKind::internal, "denoise group ended before admitting a job"));
    m.outcome->done.set();
  }
  group->done.set();
}

asio::awaitable<void> Batcher::run_work(Group& group, const Placement& placement) {
  if (group.kind == BatchKind::denoise) co_await run_denoise_loop(group, placement, options_, this);
  else co_await run_once(group, placement);
}

// A free device other than those in `avoid`, now (never waits: a busy fleet shrinks instead).
std::optional<Placement> Batcher::place_elsewhere(const Group& group, const std::vector<std::string>& avoid) {
  PlacementRequest req;
  req.model = group.family->package().id();
  req.avoid = avoid;
  auto lease = options_.devices->try_acquire(req);
  if (!lease) return std::nullopt;
  Placement p;
  p.lease = std::move(*lease);
  p.device = p.lease.device().id;
  p.pool = &options_.executor->pool(device_pool_name(p.device));
  {
    std::lock_guard lock(mutex_);
    ++oom_moves_;
  }
  if (options_.metrics)
    options_.metrics->counter("vgen_oom_moves_total", "Batched groups moved to another device after running out of memory", {})
        .inc();
  return p;
}

std::uint64_t Batcher::oom_moves() const {
  std::lock_guard lock(mutex_);
  return oom_moves_;
}

namespace {

// The audio decode spans of one decode call, on the calling compute thread's device track:
// one per interval (jobs whose sound was decoded in one call share it).
void trace_audio_decode(Tracer* tracer, const std::string& device, const std::vector<FamilyJob*>& jobs) {
  if (tracer == nullptr || !tracer->enabled()) return;
  std::vector<std::pair<FamilyJob::clock_point, FamilyJob::clock_point>> done;
  for (const auto* w : jobs) {
    if (!w->audio || w->audio_end <= w->audio_start) continue;
    const std::pair interval{w->audio_start, w->audio_end};
    if (std::find(done.begin(), done.end(), interval) != done.end()) continue;
    done.push_back(interval);
    tracer->span("devices", tracer->thread_track(device), "audio_decode", w->audio_start, w->audio_end);
  }
}

}  // namespace

// Preprocess or decode: one family call for every live member.
asio::awaitable<void> Batcher::run_once(Group& group, const Placement& placement) {
  std::vector<FamilyJob*> live;
  for (auto* m : live_members(group)) live.push_back(m->work.get());
  if (live.empty()) co_return;
  auto run = [&group, &live, device = placement.device, tracer = options_.tracer, &on_call = options_.on_model_call] {
    TraceSpan span(tracer, device, to_string(group.kind), {{"batch", live.size()}});
    const auto start = std::chrono::steady_clock::now();
    const OncePerJobCalls once(device);  // text encoders and VAEs run as exported on a CPU (model_backend.hpp)
    if (group.kind == BatchKind::decode) {
      group.family->decode(device, live);
      trace_audio_decode(tracer, device, live);  // here: the span goes on this compute thread's track
    } else {
      group.family->prepare(device, live);
    }
    if (on_call) on_call(group.kind, group.key, live.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return 0;
  };
  co_await placement.pool->run(run);
  for (auto* w : live) w->device = placement.device;
  if (group.kind == BatchKind::decode) report_audio_decode(group);
}

// A family with sound times its audio decode inside decode(): the stage "audio_decode" in the
// metrics and each job's stage_seconds (silent jobs leave their interval empty and add nothing).
void Batcher::report_audio_decode(Group& group) {
  for (auto* m : live_members(group)) {
    const auto& w = *m->work;
    if (!w.audio || w.audio_end <= w.audio_start) continue;
    const double seconds = std::chrono::duration<double>(w.audio_end - w.audio_start).count();
    m->job->record_stage_time("audio_decode", seconds);
    if (options_.metrics)
      options_.metrics->histogram("vgen_stage_duration_seconds", "Time a job spent in a stage", {{"stage", "audio_decode"}})
          .observe(seconds);
  }
}

std::map<std::size_t, std::uint64_t> Batcher::group_sizes(BatchKind kind) const {
  std::lock_guard lock(mutex_);
  std::map<std::size_t, std::uint64_t> out;
  for (const auto& [k, n] : sizes_)
    if (k.first == kind) out[k.second] = n;
  return out;
}

std::vector<std::pair<std::string, std::size_t>> Batcher::group_log() const {
  std::lock_guard lock(mutex_);
  return log_;
}

std::string_view to_string(BatchKind kind) {
  switch (kind) {
    case BatchKind::preprocess: return "preprocess";
    case BatchKind::denoise: return "denoise";
    case BatchKind::decode: return "decode";
  }
  return "?";
}

}  // namespace vgen
