#include "stages/job_batcher.hpp"

#include "runtime/errors.hpp"
#include "stages/text_context.hpp"

#include <ATen/ATen.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

namespace vgen {

namespace asio = boost::asio;

struct JobBatcher::Member {
  std::shared_ptr<Job> job;
  std::shared_ptr<WanJob> work;  // shared with the job's payload (outlives a cancelled job's)
  std::unique_ptr<Scheduler> scheduler;
  TextContext text;  // the job's text rows at the group's row count (stages/text_context.hpp)
  bool dropped = false;
};

struct JobBatcher::Group {
  BatchKind kind = BatchKind::denoise;
  std::string key;
  std::vector<Member> members;
  bool closed = false;             // no more joins (full, timed out, or running)
  AsyncEvent done;                 // set when the loop has ended (results or error)
  std::exception_ptr error;
};

namespace {

// What must match for jobs to share transformer calls.
std::string compatibility_key(const WanRuntime& rt, const WanJob& w, const Scheduler& s) {
  std::string k = std::string(s.name()) + "|" + std::to_string(w.spec.steps) + "|" + (w.spec.guidance > 1.0 ? "cfg" : "nocfg");
  for (auto d : w.latents.sizes()) k += "|" + std::to_string(d);
  // Text rows of any length share a call: the group pads them to one row count.
  k += "|" + std::to_string(w.embeds.size(0)) + "x" + std::to_string(w.embeds.size(2));
  return k + "|" + rt.package.id();
}

// The guided flow prediction [live, ...] for every live member from their model inputs `x`
// [live, ...] at `timestep`: one transformer call (each job's cond and uncond rows together),
// then each job's guidance in the transformer's dtype, as WanPipeline does (so a bf16 package
// follows diffusers' bf16 numerics too).
at::Tensor guided_prediction(WanRuntime& rt, const std::vector<JobBatcher::Member*>& live, const at::Tensor& x,
                             const at::Tensor& timestep, const std::string& device) {
  if (rt.options.before_denoise)
    rt.options.before_denoise(live.size(), device, live.front()->job->id(), live.front()->job->snapshot().attempts);
  const bool cfg = live.front()->work->spec.guidance > 1.0;
  std::vector<at::Tensor> contexts, biases;
  for (auto* m : live) {
    contexts.push_back(m->text.context);  // [2 or 1, rows, D]: cond (, uncond)
    if (m->text.bias.defined()) biases.push_back(m->text.bias);
  }
  auto cat = [](const std::vector<at::Tensor>& xs) { return xs.empty() ? at::Tensor() : xs.size() == 1 ? xs[0] : at::cat(xs, 0); };
  auto input = cfg ? x.repeat_interleave(2, 0) : x;  // job j's rows 2j (cond), 2j+1 (uncond)
  auto t = timestep.to(at::kFloat).expand({input.size(0)}).contiguous();  // float32 always
  auto pred = predict_flow(rt, device, input, t, cat(contexts), cat(biases)).to(at::kCPU);
  if (!cfg) return pred;
  auto cond = pred.slice(0, 0, pred.size(0), 2), uncond = pred.slice(0, 1, pred.size(0), 2);
  const double g = live.front()->work->spec.guidance;
  if (std::all_of(live.begin(), live.end(), [g](auto* m) { return m->work->spec.guidance == g; }))
    return uncond + g * (cond - uncond);
  std::vector<at::Tensor> rows;
  for (std::size_t j = 0; j < live.size(); ++j) {
    const auto r = static_cast<std::int64_t>(j);
    rows.push_back(uncond.narrow(0, r, 1) + live[j]->work->spec.guidance * (cond.narrow(0, r, 1) - uncond.narrow(0, r, 1)));
  }
  return at::cat(rows, 0);
}

// One step of a group: the members' latents are one batch [N, ...] stepped by one scheduler
// (steps are row-wise, stages/scheduler.hpp), so its coefficient math runs once per step
// instead of once per job. Dropped members keep their rows, fed a zero prediction, which
// touches no other row. A scheduler that draws noise (DDIM eta > 0, stochastic_sampling)
// draws it for the batch from the default generator, as WanPipeline's step() does per call.
void step_together(WanRuntime& rt, std::vector<JobBatcher::Member>& members, const std::vector<JobBatcher::Member*>& live,
                   Scheduler& scheduler, at::Tensor& latents, int i, const std::string& device) {
  auto x = scheduler.scale_model_input(latents, i);
  std::vector<std::int64_t> rows;
  for (auto* m : live) rows.push_back(m - members.data());
  const bool all = live.size() == members.size();
  const auto index = at::tensor(rows, at::kLong);
  auto pred = guided_prediction(rt, live, all ? x : x.index_select(0, index), scheduler.timesteps()[i], device);
  if (!all) pred = at::zeros(x.sizes(), pred.options()).index_copy_(0, index, pred);
  latents = scheduler.step(pred, i, latents);
  for (std::size_t j = 0; j < live.size(); ++j)
    if (live[j]->work->on_step) live[j]->work->on_step(i, latents.narrow(0, rows[j], 1));
}

// Members whose jobs are not cancelled (the others are marked dropped), for a one-call group.
std::vector<JobBatcher::Member*> live_members(JobBatcher::Group& group);

}  // namespace

asio::awaitable<void> JobBatcher::join(WanRuntime& rt, Job& job, BatchKind kind) {
  Member self;
  self.job = job.shared_from_this();
  self.work = shared_wan_job(job);
  auto& w = *self.work;
  std::string key;
  if (kind == BatchKind::denoise) {
    self.scheduler = make_job_scheduler(rt.package, w.spec.scheduler);
    self.scheduler->set_timesteps(w.spec.steps);
    key = "denoise|" + compatibility_key(rt, w, *self.scheduler);
  } else if (kind == BatchKind::decode) {
    key = "decode|" + rt.package.id();
    for (auto d : w.latents.sizes()) key += "|" + std::to_string(d);
  } else {
    key = "preprocess|" + rt.package.id();  // any prompts: the text encoder takes [B, max_length]
  }

  std::shared_ptr<Group> group;
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    // After an out-of-memory error this key's groups are capped (halved each time, down to 1).
    const auto cap = caps_.count(key) ? caps_[key] : max_batch_;
    auto& slot = open_[key];
    if (!slot) {
      slot = std::make_shared<Group>();
      slot->key = key;
      slot->kind = kind;
      first = true;
    }
    group = slot;
    group->members.push_back(std::move(self));
    if (group->members.size() >= cap) {
      group->closed = true;
      open_.erase(key);
    }
  }
  if (first) asio::co_spawn(co_await asio::this_coro::executor, run_group(rt, group), asio::detached);
  co_await group->done.wait();  // cancellable: the pipeline stops waiting, the group goes on
  if (group->error) std::rethrow_exception(group->error);
  job.throw_if_cancelled();
}

void JobBatcher::close(Group& group) {
  std::lock_guard lock(mutex_);
  if (group.closed) return;
  group.closed = true;
  if (auto it = open_.find(group.key); it != open_.end() && it->second.get() == &group) open_.erase(it);
}

bool JobBatcher::is_closed(const Group& group) const {
  std::lock_guard lock(mutex_);
  return group.closed;
}

asio::awaitable<void> JobBatcher::run_group(WanRuntime& rt, std::shared_ptr<Group> group) {
  try {
    // Collect until full (a joiner closes the group) or the wait is over. Polling in 1 ms
    // ticks keeps the timer private to this coroutine (no cross-thread cancel).
    const auto deadline = std::chrono::steady_clock::now() + wait_;
    asio::steady_timer tick(co_await asio::this_coro::executor);
    while (!is_closed(*group) && std::chrono::steady_clock::now() < deadline) {
      tick.expires_after(std::chrono::milliseconds(1));
      co_await tick.async_wait(asio::use_awaitable);
    }
    // Then take the device, still collecting: while the device is busy with other work,
    // jobs that arrive join this group instead of queueing behind it in groups of their own
    // (as a dynamic batcher forms its batch when a model instance frees up). A free device
    // is granted at once, so this adds no wait.
    auto placement = co_await place(rt);
    close(*group);
    {
      std::lock_guard lock(mutex_);
      ++sizes_[{group->kind, group->members.size()}];
    }
    if (metrics_)
      metrics_
          ->histogram("vgen_batch_size", "Jobs per cross-job batched call group", {{"stage", std::string(to_string(group->kind))}},
                      {1, 2, 4, 8, 16, 32, 64, 128, 256})
          .observe(static_cast<double>(group->members.size()));
    if (group->kind == BatchKind::denoise) co_await run_loop(rt, *group, placement);
    else if (group->kind == BatchKind::decode) co_await run_decode(rt, *group, placement);
    else co_await run_preprocess(rt, *group, placement);
  } catch (...) {
    close(*group);  // a group that failed before it closed takes no more jobs
    group->error = std::current_exception();
    if (classify(group->error) == ErrorKind::out_of_memory && group->members.size() > 1) {
      std::lock_guard lock(mutex_);
      caps_[group->key] = std::max<std::size_t>(1, group->members.size() / 2);  // the retry runs smaller
    }
  }
  group->done.set();
}

asio::awaitable<void> JobBatcher::run_loop(WanRuntime& rt, Group& group, const Placement& placement) {
  // One text row count for the whole group: max_length, or with a compact-context package
  // the group's longest text + 1 (stages/text_context.hpp).
  const auto& p = rt.package;
  std::vector<std::int64_t> lengths;
  for (auto& m : group.members) lengths.insert(lengths.end(), m.work->embed_lengths.begin(), m.work->embed_lengths.end());
  const auto rows = context_rows(lengths, p.max_length, p.transformer_compact_context);
  for (auto& m : group.members) {
    m.text = make_context({m.work->embeds, m.work->embed_lengths}, rows, p.max_length, p.transformer_compact_context);
    m.work->device = placement.device;
  }
  // Members share the scheduler's configuration and steps (compatibility_key): one instance
  // steps them all.
  Scheduler& scheduler = *group.members.front().scheduler;
  std::vector<at::Tensor> all;
  for (auto& m : group.members) all.push_back(m.work->latents * scheduler.init_noise_sigma());
  at::Tensor latents = all.size() == 1 ? all[0] : at::cat(all, 0);
  const int steps = static_cast<int>(scheduler.timesteps().size(0));
  for (int i = 0; i < steps; ++i) {
    std::vector<Member*> live;
    for (auto& m : group.members) {
      if (!m.dropped && m.job->cancel_requested()) m.dropped = true;
      if (!m.dropped) live.push_back(&m);
    }
    if (live.empty()) co_return;
    auto step = [&, i, device = placement.device] {
      step_together(rt, group.members, live, scheduler, latents, i, device);
      return 0;
    };
    co_await placement.pool->run(step);
    for (auto* m : live) m->job->report_progress(i + 1, steps);
  }
  for (std::size_t j = 0; j < group.members.size(); ++j)
    if (!group.members[j].dropped) group.members[j].work->latents = latents.narrow(0, static_cast<std::int64_t>(j), 1).clone();
}

std::map<std::size_t, std::uint64_t> JobBatcher::group_sizes(BatchKind kind) const {
  std::lock_guard lock(mutex_);
  std::map<std::size_t, std::uint64_t> out;
  for (const auto& [k, n] : sizes_)
    if (k.first == kind) out[k.second] = n;
  return out;
}

namespace {

std::vector<JobBatcher::Member*> live_members(JobBatcher::Group& group) {
  std::vector<JobBatcher::Member*> live;
  for (auto& m : group.members) {
    m.dropped = m.job->cancel_requested();
    if (!m.dropped) live.push_back(&m);
  }
  return live;
}

}  // namespace

// One VAE call for every live member: un-normalise each job's latents, decode them as one
// batch, split the frames back ([F, H, W, 3] in [0, 1] per job).
asio::awaitable<void> JobBatcher::run_decode(WanRuntime& rt, Group& group, const Placement& placement) {
  auto live = live_members(group);
  if (live.empty()) co_return;
  auto run = [&rt, &live, device = placement.device] {
    const auto& p = rt.package;
    const auto c = p.latent_channels;
    auto mean = at::tensor(p.latents_mean, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
    auto std = at::tensor(p.latents_std, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
    std::vector<at::Tensor> zs;
    for (auto* m : live) zs.push_back(m->work->latents);
    auto z = (zs.size() == 1 ? zs[0] : at::cat(zs, 0)) / (1.0 / std) + mean;  // exactly diffusers' un-normalisation
    auto vae = wan_module(rt, "vae_decoder", device);
    auto video = vae->forward({z.to(vae->dtype())}).to(at::kCPU).to(at::kFloat);  // [N,3,F,H,W]
    for (std::size_t j = 0; j < live.size(); ++j)
      live[j]->work->frames = (video[static_cast<std::int64_t>(j)] / 2 + 0.5).clamp(0, 1).permute({1, 2, 3, 0}).contiguous();
    return 0;
  };
  co_await placement.pool->run(run);
  for (auto* m : live) m->work->device = placement.device;
}

// Text embeddings and initial noise for every live member: one text-encoder call for the
// group's uncached prompts (stages/wan_job.hpp prepare_jobs).
asio::awaitable<void> JobBatcher::run_preprocess(WanRuntime& rt, Group& group, const Placement& placement) {
  std::vector<WanJob*> live;
  for (auto* m : live_members(group)) live.push_back(m->work.get());
  if (live.empty()) co_return;
  auto run = [&rt, &live, device = placement.device] {
    prepare_jobs(rt, device, live);
    return 0;
  };
  co_await placement.pool->run(run);
  for (auto* w : live) w->device = placement.device;
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
