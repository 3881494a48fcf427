#include "stages/denoise_loop.hpp"

#include "runtime/errors.hpp"
#include "runtime/trace.hpp"

#include <ATen/ATen.h>

namespace vgen {

namespace asio = boost::asio;

namespace {

using Member = Batcher::Member;

std::vector<Member*> still_live(std::vector<Member>& members) {
  std::vector<Member*> live;
  for (auto& m : members) {
    if (!m.dropped && m.job->cancel_requested()) m.dropped = true;
    if (!m.dropped) live.push_back(&m);
  }
  return live;
}

// One step of a group on the compute thread: the live rows' prediction in one family call,
// then one scheduler step for all rows (a dropped row is fed zero, which touches no other row).
// A scheduler that draws noise (DDIM eta > 0, stochastic_sampling) draws it for the batch
// from the default generator, as WanPipeline's step() does per call.
void step_once(Batcher::Group& group, const std::vector<Member*>& live, Scheduler& scheduler, at::Tensor& latents, int i,
               const std::string& device, const BatcherOptions& options) {
  if (options.before_denoise)
    options.before_denoise(live.size(), device, live.front()->job->id(), live.front()->job->snapshot().attempts);
  auto x = scheduler.scale_model_input(latents, i);
  std::vector<std::int64_t> rows;
  std::vector<FamilyJob*> jobs;
  for (auto* m : live) {
    rows.push_back(m - group.members.data());
    jobs.push_back(m->work.get());
  }
  const bool all = live.size() == group.members.size();
  const auto index = at::tensor(rows, at::kLong);
  const auto input = all ? x : x.index_select(0, index);
  const auto timestep = scheduler.timesteps()[i];
  auto pred = group.family->predict(PredictCall{jobs, input, timestep, device});
  if (!all) pred = at::zeros(x.sizes(), pred.options()).index_copy_(0, index, pred);
  latents = scheduler.step(pred, i, latents);
  std::vector<Job*> live_jobs;
  for (std::size_t j = 0; j < live.size(); ++j) {
    auto& state = live[j]->work->state;
    state.step = i + 1;
    state.latents = latents.narrow(0, rows[j], 1);  // views: the final rows are cloned at the end
    state.scheduler = scheduler.save_row(rows[j]);
    live_jobs.push_back(live[j]->job.get());
    if (live[j]->work->on_step) live[j]->work->on_step(i, state.latents);
  }
  if (options.after_step) options.after_step(live_jobs, jobs, scheduler);
}

// The group's latents at its first step: the members' noise scaled by the scheduler, or, for
// members resumed from a checkpoint (all at the same step: the batcher's key), their saved
// samples and the scheduler history they carried.
at::Tensor starting_latents(Batcher::Group& group, Scheduler& scheduler, int start) {
  std::vector<at::Tensor> rows;
  std::vector<const SchedulerRowState*> history;
  for (auto& m : group.members) {
    const auto& state = m.work->state;
    if (state.step != start) throw_error(ErrorKind::internal, "denoise group mixes jobs at different steps");
    rows.push_back(start == 0 ? state.latents * scheduler.init_noise_sigma() : state.latents);
    history.push_back(&state.scheduler);
  }
  if (start > 0) scheduler.restore_rows(start, history);
  return rows.size() == 1 ? rows[0] : at::cat(rows, 0);
}

asio::awaitable<void> run_steps(Batcher::Group& group, const Placement& placement, const BatcherOptions& options) {
  std::vector<FamilyJob*> all_jobs;
  for (auto& m : group.members) all_jobs.push_back(m.work.get());
  group.family->begin_denoise(all_jobs, placement.device);
  // Members share the scheduler's configuration and steps (denoise_key): one instance steps them all.
  Scheduler& scheduler = *group.members.front().scheduler;
  const int start = group.members.front().work->state.step;
  at::Tensor latents = starting_latents(group, scheduler, start);
  const int steps = static_cast<int>(scheduler.timesteps().size(0));
  for (int i = start; i < steps; ++i) {
    auto live = still_live(group.members);
    if (live.empty()) co_return;
    auto step = [&, i, device = placement.device] {
      TraceSpan span(options.tracer, device, "denoise step", {{"batch", live.size()}, {"step", i}});
      step_once(group, live, scheduler, latents, i, device, options);
      return 0;
    };
    co_await placement.pool->run(step);
    for (auto* m : live) m->job->report_progress(i + 1, steps);
  }
  for (std::size_t j = 0; j < group.members.size(); ++j)
    if (!group.members[j].dropped) {
      auto& state = group.members[j].work->state;
      state.latents = latents.narrow(0, static_cast<std::int64_t>(j), 1).clone();
      state.scheduler = {};  // no step follows: drop the views into the history
    }
}

}  // namespace

asio::awaitable<void> run_denoise_loop(Batcher::Group& group, const Placement& placement, const BatcherOptions& options) {
  std::vector<StepState> start;  // restored if the group fails, so that a retry starts clean
  for (auto& m : group.members) {
    start.push_back(m.work->state);
    m.work->device = placement.device;
  }
  try {
    co_await run_steps(group, placement, options);
  } catch (...) {
    for (std::size_t j = 0; j < group.members.size(); ++j) group.members[j].work->state = start[j];
    throw;
  }
}

}  // namespace vgen
