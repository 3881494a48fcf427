#include "stages/exec/denoise_loop.hpp"

#include "runtime/errors.hpp"
#include "runtime/trace.hpp"
#include "stages/exec/denoise_news.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

namespace vgen {

namespace asio = boost::asio;

namespace {

using Member = Batcher::Member;

// Members that are at the same step and share one scheduler instance (the first one's): the
// group's starting members, or the jobs admitted together at one step boundary.
struct Cohort {
  std::vector<std::size_t> rows;  // member indices, in row order of `latents`
  Scheduler* scheduler = nullptr;
  at::Tensor latents;
  int step = 0;
};

// What one step did, for the io thread's events and metrics.
struct StepTally {
  std::size_t called = 0, skipped = 0;
};

// A cohort from members (all at the same step): their noise scaled by the scheduler, or, for
// jobs resumed from a checkpoint or preempted, their saved samples and scheduler history.
Cohort start_cohort(Batcher::Group& group, std::vector<std::size_t> rows) {
  Cohort c;
  c.rows = std::move(rows);
  auto& first = group.members[c.rows.front()];
  c.scheduler = first.scheduler.get();
  c.step = first.work->state.step;
  c.scheduler->set_timesteps(c.scheduler->num_inference_steps());  // no history left from an earlier run
  std::vector<at::Tensor> latents;
  std::vector<const SchedulerRowState*> history;
  for (auto r : c.rows) {
    const auto& state = group.members[r].work->state;
    if (state.step != c.step) throw_error(ErrorKind::internal, "denoise cohort mixes jobs at different steps");
    latents.push_back(c.step == 0 ? state.latents * c.scheduler->init_noise_sigma() : state.latents);
    history.push_back(&state.scheduler);
  }
  if (c.step > 0) c.scheduler->restore_rows(c.step, history);
  c.latents = latents.size() == 1 ? latents[0] : at::cat(latents, 0);
  return c;
}

void count(const BatcherOptions& options, const char* name, const char* help, std::size_t n) {
  if (options.metrics && n > 0) options.metrics->counter(name, help, {}).inc(static_cast<double>(n));
}

// Cohorts for members not yet in one (by their next step), taking their entry state. A job that
// was preempted goes on from its step here: its "resumed" event.
void add_cohorts(Batcher::Group& group, std::size_t from, std::vector<Cohort>& cohorts, const BatcherOptions& options) {
  std::map<int, std::vector<std::size_t>> by_step;
  std::size_t resumed = 0;
  for (std::size_t i = from; i < group.members.size(); ++i) {
    auto& m = group.members[i];
    if (m.finished || m.dropped) continue;
    m.entry = m.work->state;
    m.cache = StepCache(m.work->spec.step_cache);
    by_step[m.work->state.step].push_back(i);
    if (m.work->state.step > 0 && preemptions(m.job->snapshot()) > 0) {
      report_scheduling(*m.job, "resumed", m.work->state.step, m.work->spec.steps);
      ++resumed;
    }
  }
  for (auto& [step, rows] : by_step) cohorts.push_back(start_cohort(group, std::move(rows)));
  count(options, "vgen_denoise_resumed_total", "Preempted jobs that went on from their step in a denoise group", resumed);
}

void leave(Member& m) {
  if (!m.outcome->done.is_set()) m.outcome->done.set();
}

// One step of every cohort on the compute thread: the rows that need the denoiser (all live
// rows, less those the step cache skips) in ONE family call with each row's own timestep, then
// one scheduler step per cohort (a dropped row is fed zero, which touches no other row).
// A scheduler that draws noise (DDIM eta > 0, stochastic_sampling) draws it for the cohort's
// batch from the default generator, as WanPipeline's step() does per call.
StepTally step_all(Batcher::Group& group, std::vector<Cohort>& cohorts, const std::string& device,
                   const BatcherOptions& options) {
  struct Part {
    at::Tensor x;                            // the cohort's scaled input
    std::vector<std::int64_t> live, called;  // positions within the cohort
  };
  std::vector<Part> parts(cohorts.size());
  std::vector<FamilyJob*> jobs;
  Job* first_job = nullptr;  // the call's first row (fault injection keys on it)
  std::vector<at::Tensor> inputs, timesteps;
  StepTally tally;
  for (std::size_t c = 0; c < cohorts.size(); ++c) {
    auto& co = cohorts[c];
    auto& part = parts[c];
    part.x = co.scheduler->scale_model_input(co.latents, co.step);
    const int steps = co.scheduler->num_inference_steps();
    for (std::size_t p = 0; p < co.rows.size(); ++p) {
      auto& m = group.members[co.rows[p]];
      if (m.dropped) continue;
      const auto pos = static_cast<std::int64_t>(p);
      part.live.push_back(pos);
      if (!m.cache.needs_call(co.step, steps, part.x.narrow(0, pos, 1))) {
        record_skipped(*m.job, 1);  // its next progress event says so
        continue;
      }
      part.called.push_back(pos);
      jobs.push_back(m.work.get());
      if (!first_job) first_job = m.job.get();
    }
    if (part.called.empty()) continue;
    const bool whole = part.called.size() == co.rows.size();
    inputs.push_back(whole ? part.x : part.x.index_select(0, at::tensor(part.called, at::kLong)));
    timesteps.push_back(co.scheduler->timesteps()[co.step].reshape({1}).expand({static_cast<std::int64_t>(part.called.size())}));
  }
  at::Tensor pred;
  if (!jobs.empty()) {
    if (options.before_denoise)
      options.before_denoise(jobs.size(), device, first_job->id(), first_job->snapshot().attempts);
    auto cat = [](const std::vector<at::Tensor>& xs) { return xs.size() == 1 ? xs[0] : at::cat(xs, 0); };
    const auto x = cat(inputs), t = cat(timesteps).contiguous();
    const auto start = std::chrono::steady_clock::now();
    pred = group.family->predict(PredictCall{jobs, x, t, device});
    if (options.on_model_call)
      options.on_model_call(BatchKind::denoise, group.base_key, jobs.size(),
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::int64_t offset = 0;  // into pred
  for (std::size_t c = 0; c < cohorts.size(); ++c) {
    auto& co = cohorts[c];
    auto& part = parts[c];
    at::Tensor full;
    if (part.called.size() == co.rows.size()) {  // every row called: the family's rows as they are
      full = pred.narrow(0, offset, static_cast<std::int64_t>(co.rows.size()));
    } else {
      std::vector<at::Tensor> rows(co.rows.size());
      for (std::size_t k = 0; k < part.called.size(); ++k) rows[part.called[k]] = pred.narrow(0, offset + static_cast<std::int64_t>(k), 1);
      for (auto p : part.live)
        if (!rows[p].defined()) rows[p] = group.members[co.rows[p]].cache.reuse(part.x.narrow(0, p, 1));
      const auto dtype = pred.defined() ? pred.scalar_type() : rows[part.live.front()].scalar_type();
      for (auto& r : rows) r = r.defined() ? r.to(dtype) : at::zeros(part.x.narrow(0, 0, 1).sizes(), part.x.options().dtype(dtype));
      full = rows.size() == 1 ? rows[0] : at::cat(rows, 0);
    }
    for (std::size_t k = 0; k < part.called.size(); ++k) {
      const auto p = part.called[k];
      group.members[co.rows[p]].cache.record(part.x.narrow(0, p, 1), full.narrow(0, p, 1));
    }
    offset += static_cast<std::int64_t>(part.called.size());
    tally.called += part.called.size();
    tally.skipped += part.live.size() - part.called.size();
    co.latents = co.scheduler->step(full, co.step, co.latents);
    std::vector<Job*> live_jobs;
    std::vector<FamilyJob*> live_work;
    for (auto p : part.live) {
      auto& m = group.members[co.rows[p]];
      auto& state = m.work->state;
      state.step = co.step + 1;
      state.latents = co.latents.narrow(0, p, 1);  // views: the final rows are cloned at the end
      state.scheduler = co.scheduler->save_row(p);
      live_jobs.push_back(m.job.get());
      live_work.push_back(m.work.get());
      if (m.work->on_step) m.work->on_step(co.step, state.latents);
    }
    ++co.step;
    if (options.after_step && !live_jobs.empty()) options.after_step(live_jobs, live_work, *co.scheduler);
  }
  return tally;
}

// Drops cancelled members; members of a finished cohort take their final rows and leave (their
// join() returns while the group goes on); empty cohorts go.
void settle(Batcher::Group& group, std::vector<Cohort>& cohorts) {
  for (auto& co : cohorts) {
    const bool done = co.step >= co.scheduler->num_inference_steps();
    for (std::size_t p = 0; p < co.rows.size(); ++p) {
      auto& m = group.members[co.rows[p]];
      if (m.dropped || m.finished) continue;
      if (done) {
        m.work->state.latents = co.latents.narrow(0, static_cast<std::int64_t>(p), 1).clone();
        m.work->state.scheduler = {};  // no step follows: drop the views into the history
        m.finished = true;
        leave(m);
      } else if (m.job->cancel_requested()) {
        m.dropped = true;
        leave(m);
      }
    }
  }
  std::erase_if(cohorts, [&](const Cohort& co) {
    for (auto r : co.rows)
      if (!group.members[r].dropped && !group.members[r].finished) return false;
    return true;
  });
}

// Whether a member may leave the group and go on later with the same numbers.
bool preemptible(const Member& m, const Cohort& co, const BatcherOptions& options) {
  return m.work->spec.step_cache <= 0.0 && co.scheduler->resumable() && preemptions(m.job->snapshot()) < options.max_preemptions &&
         co.step < co.scheduler->num_inference_steps();
}

// A member leaves with its own copy of its StepState (its latents row and scheduler row are
// views into the cohort's tensors, which the next step overwrites).
void leave_preempted(Member& m, Cohort& co, std::int64_t pos) {
  auto& state = m.work->state;
  if (co.step == 0) {
    state = m.entry;  // no step yet: its noise as it came (the cohort's row is already scaled)
  } else {
    state.step = co.step;
    state.latents = co.latents.narrow(0, pos, 1).clone();
    state.scheduler = co.scheduler->save_row(pos);
    for (auto& t : state.scheduler.tensors)
      if (t.defined()) t = t.clone();
  }
  m.finished = m.dropped = true;  // out of the group: fed zero, never restored, never reported
  m.outcome->preempted = true;
  report_scheduling(*m.job, "preempted", co.step, co.scheduler->num_inference_steps());
  leave(m);
}

// Rows give way to waiting jobs of a higher priority when the group has no room for them: the
// lowest priority first, the newest first among equals, one per waiter beyond the free room.
void preempt(Batcher::Group& group, std::vector<Cohort>& cohorts, const BatcherOptions& options, Batcher& batcher) {
  const auto probe = batcher.waiting_probe();
  if (!probe) return;
  struct Row {
    std::size_t cohort;
    std::int64_t pos;
    Member* m;
  };
  std::vector<Row> rows;
  std::size_t live = 0;
  for (std::size_t c = 0; c < cohorts.size(); ++c)
    for (std::size_t p = 0; p < cohorts[c].rows.size(); ++p) {
      auto& m = group.members[cohorts[c].rows[p]];
      if (m.dropped || m.finished) continue;
      ++live;
      if (preemptible(m, cohorts[c], options)) rows.push_back({c, static_cast<std::int64_t>(p), &m});
    }
  if (rows.empty()) return;
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.m->job->priority() != b.m->job->priority()) return a.m->job->priority() < b.m->job->priority();
    return a.m->job->submitted() > b.m->job->submitted();
  });
  std::size_t preempted = 0;
  for (const auto& r : rows) {
    std::size_t room = 0;
    {
      std::lock_guard lock(group.joins);
      const auto taken = live - preempted + group.pending.size();
      room = group.cap > taken ? group.cap - taken : 0;
    }
    // The probe falls as the priority rises, and rows rise: once no waiter needs a row, none does.
    if ((*probe)(r.m->job->priority()) <= room) break;
    leave_preempted(*r.m, cohorts[r.cohort], r.pos);
    ++preempted;
    {
      std::lock_guard lock(group.joins);  // room for the waiter at once: it may join before admit() runs
      if (group.active > 0) --group.active;
    }
    batcher.count_preemption();
  }
  count(options, "vgen_denoise_preempted_total", "Jobs that left a denoise group at a step boundary for higher-priority work",
        preempted);
  if (preempted > 0)
    std::erase_if(cohorts, [&](const Cohort& co) {
      for (auto r : co.rows)
        if (!group.members[r].dropped && !group.members[r].finished) return false;
      return true;
    });
}

// Admits the jobs that joined while the loop ran; false (and no more joins) when there is
// nothing left to run. Under the group's lock, so that no joiner is left behind.
bool admit(Batcher::Group& group, std::vector<Cohort>& cohorts, std::size_t& admitted, const BatcherOptions& options) {
  std::vector<Member> joined;
  {
    std::lock_guard lock(group.joins);
    std::size_t live = 0;
    for (const auto& co : cohorts)
      for (auto r : co.rows) live += !group.members[r].dropped && !group.members[r].finished;
    if (live == 0 && group.pending.empty()) {
      group.accepting = false;
      group.active = 0;
      return false;
    }
    joined.swap(group.pending);
    group.active = live + joined.size();
  }
  admitted = joined.size();
  if (joined.empty()) return true;
  const auto from = group.members.size();
  for (auto& m : joined) group.members.push_back(std::move(m));
  for (auto i = from; i < group.members.size(); ++i) {
    const auto& w = *group.members[i].work;
    report_scheduling(*group.members[i].job, "admitted", w.state.step, w.spec.steps);
  }
  add_cohorts(group, from, cohorts, options);  // after: a preempted joiner's "resumed" follows its "admitted"
  return true;
}

std::vector<FamilyJob*> live_work(Batcher::Group& group, const std::vector<Cohort>& cohorts) {
  std::vector<FamilyJob*> out;
  for (const auto& co : cohorts)
    for (auto r : co.rows)
      if (!group.members[r].dropped && !group.members[r].finished) out.push_back(group.members[r].work.get());
  return out;
}

std::size_t rows_in(const std::vector<Cohort>& cohorts) {
  std::size_t n = 0;
  for (const auto& co : cohorts) n += co.rows.size();
  return n;
}

asio::awaitable<void> run_steps(Batcher::Group& group, const Placement& placement, const BatcherOptions& options,
                                Batcher* batcher) {
  std::vector<Cohort> cohorts;
  for (auto& m : group.members)
    if (!m.finished && !m.dropped && m.job->cancel_requested()) m.dropped = true;
  add_cohorts(group, 0, cohorts, options);
  group.family->begin_denoise(live_work(group, cohorts), placement.device);
  for (;;) {
    std::size_t admitted = 0;
    settle(group, cohorts);
    if (batcher) preempt(group, cohorts, options, *batcher);
    if (!admit(group, cohorts, admitted, options)) co_return;
    if (admitted > 0) {
      for (auto* w : live_work(group, cohorts)) w->device = placement.device;
      // The family sets the group up again for all live jobs (e.g. one text row count).
      group.family->begin_denoise(live_work(group, cohorts), placement.device);
      count(options, "vgen_denoise_admitted_total", "Jobs admitted into a running denoise group at a step boundary",
            admitted);
    }
    if (cohorts.empty()) continue;  // only cancelled joiners: look again
    StepTally tally;
    auto step = [&, device = placement.device] {
      TraceSpan span(options.tracer, device, "denoise step", {{"batch", rows_in(cohorts)}, {"cohorts", cohorts.size()}});
      tally = step_all(group, cohorts, device, options);
      return 0;
    };
    co_await placement.pool->run(step);
    count(options, "vgen_step_cache_skipped_total", "Denoiser calls the step cache skipped (one per job and step)",
          tally.skipped);
    for (const auto& co : cohorts)
      for (auto r : co.rows)
        if (!group.members[r].dropped && !group.members[r].finished)
          report_step(*group.members[r].job, co.step, co.scheduler->num_inference_steps());
  }
}

}  // namespace

asio::awaitable<void> run_denoise_loop(Batcher::Group& group, const Placement& placement, const BatcherOptions& options,
                                       Batcher* batcher) {
  for (auto& m : group.members) m.work->device = placement.device;
  try {
    co_await run_steps(group, placement, options, batcher);
  } catch (...) {
    // Members still in the group go back to how they entered it, so that a retry starts clean.
    for (auto& m : group.members)
      if (!m.finished && m.entry.latents.defined()) m.work->state = m.entry;
    throw;
  }
}

}  // namespace vgen
