#include "api/runtime_tuning.hpp"

#include "stages/exec/batch_kind.hpp"
#include "stages/exec/tune_probe.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <thread>

namespace vgen {

namespace json = boost::json;

namespace {

std::optional<std::size_t> given(std::size_t v) {
  return v == RuntimeConfig::kAuto ? std::nullopt : std::optional<std::size_t>(v);
}

}  // namespace

RuntimeTuning::RuntimeTuning(RuntimeConfig& c, const LoadedModels& models, const std::vector<DeviceSpec>& devices,
                             MetricsRegistry& metrics, std::size_t cores)
    : metrics_(metrics) {
  if (cores == 0) cores = std::max(1u, std::thread::hardware_concurrency());
  if (devices.empty()) throw_error(ErrorKind::invalid_argument, "auto-tune: no device");
  const auto& device = devices.front();
  const bool cpu = device.kind == DeviceKind::cpu;
  device_ = cpu ? "cpu" : device.id + ":" + std::to_string(device.memory_bytes >> 20) + "MiB";
  const auto cpu_devices = static_cast<std::size_t>(std::count_if(devices.begin(), devices.end(), [](const DeviceSpec& d) { return d.kind == DeviceKind::cpu; }));

  TuneSpace space;
  space.max_batch = c.tune.max_batch;
  space.one_job = c.tune.one_job;
  space.batch = space.one_job ? std::optional<std::size_t>(1) : given(c.batching.max_batch);
  space.leases = given(c.threads_per_device);
  space.intra_op = given(c.intra_op_threads);
  if (cpu) {
    space.cores = std::max<std::size_t>(1, cores / std::max<std::size_t>(1, cpu_devices));
  } else {  // a GPU: the batch is what matters; one lease, the host's cores shared out as before
    space.cores = 1;
    if (!space.leases) space.leases = 1;
    if (!space.intra_op) space.intra_op = std::max<std::size_t>(1, cores / (devices.size() * *space.leases));
  }
  model_ = models.models.empty() ? std::string() : models.models.front().first;

  const auto splits = AutoTuner::splits(space);
  if (splits.size() == 1 && space.batch) {  // nothing left to measure
    choice_.setting = splits.front();
    choice_.setting.batch = *space.batch;
    choice_.source = "config";
  } else {
    json::object spec = c.tune.spec;
    if (!spec.contains("prompt")) spec["prompt"] = "auto-tune probe";
    try {
      probe_ = std::make_unique<TuneProbe>(models, spec, device.id);
      probe_->set_decode_batch(c.batching.max_decode_batch);  // settled before the tuner (api/engine.cpp)
      model_ = probe_->model();
      space.steps = probe_->steps();
      space.measure_calls = TuneProbe::kCalls + 2;  // a warm-up call, the timed calls, a decode
      tuner_key_ = probe_->shape_key() + "|" + device_;
      tuner_ = std::make_unique<AutoTuner>(AutoTuner::Options{
          .cache_dir = c.tune.dir.empty() ? default_tune_cache_dir() : c.tune.dir,
          .budget = std::chrono::duration<double>(c.tune.budget_s)});
      // Under mutex_: between jobs this runs on the search thread while on_capped may ask key()
      // (TuneProbe: never both at once). The measured groups are freed after each sample, so a
      // search that goes on for the runtime's life keeps no decoded clips beside the real jobs'.
      auto measure = [this](const TuneSetting& s) {
        std::lock_guard lock(mutex_);
        auto sample = probe_->measure(s);
        probe_->release();
        return sample;
      };
      auto started = tuner_->start(tuner_key_, space, measure,
                                   std::chrono::duration<double>(c.tune.first_wait_s), /*learns_from_jobs=*/true);
      choice_ = std::move(started.choice);
      search_ = std::move(started.search);
      // The Batcher's key for on_capped, and for observe() while the search goes on (prepares one job).
      if (choice_.source == "probe" || search_) {
        const auto& key = probe_->key();
        if (search_) denoise_key_ = key;
      }
    } catch (const std::exception& e) {
      // A shape the model refuses fails its jobs anyway (with a clear error): no warning twice.
      const auto level = classify(std::current_exception()) == ErrorKind::invalid_argument ? spdlog::level::debug : spdlog::level::warn;
      spdlog::log(level, "auto-tune: cannot measure model '{}' ({}); using batch 1, one lease", model_, e.what());
      choice_ = TuneChoice{};
      choice_.setting = {space.batch.value_or(1), space.leases.value_or(1),
                         space.intra_op.value_or(std::max<std::size_t>(1, space.cores / space.leases.value_or(1)))};
      choice_.source = "fallback";
      tuner_.reset();
      probe_.reset();
    }
  }
  c.batching.max_batch = choice_.setting.batch;
  c.threads_per_device = choice_.setting.leases;
  c.intra_op_threads = choice_.setting.intra_op;
  batch_limit_ = search_ ? std::max(choice_.setting.batch, space.one_job ? std::size_t(1) : space.batch.value_or(space.max_batch))
                         : choice_.setting.batch;
  running_batch_ = choice_.setting.batch;
  first_wait_s_ = c.tune.first_wait_s;
  device_id_ = device.id;
  if (search_)
    spdlog::info("auto-tune: starting with {} for model '{}' on {} ({}: {} settings measured in {:.1f} s, first wait {} s); "
                 "the search goes on between jobs",
                 to_string(choice_.setting), model_, device_, choice_.source, choice_.samples.size(), choice_.probe_s, c.tune.first_wait_s);
  else if (choice_.source == "probe")
    spdlog::info("auto-tune: {} for model '{}' on {} (probed {} settings in {:.1f} s; cached in {})", to_string(choice_.setting),
                 model_, device_, choice_.samples.size(), choice_.probe_s,
                 choice_.file.empty() ? std::string("nowhere") : choice_.file.string());
  else if (choice_.source == "cache")
    spdlog::info("auto-tune: {} for model '{}' on {} (from {})", to_string(choice_.setting), model_, device_, choice_.file.string());
  else if (choice_.source == "fallback")
    spdlog::info("auto-tune: {} for model '{}' on {} (fallback)", to_string(choice_.setting), model_, device_);
  export_choice(model_, device_);
}

void RuntimeTuning::export_choice(const std::string& model, const std::string& device) {
  const Labels labels{{"model", model}, {"device", device}, {"source", choice_.source}};
  metrics_.gauge("vgen_tune_max_batch", "Jobs per model call the runtime runs with (auto-tuned or configured)", labels)
      .set(static_cast<double>(choice_.setting.batch));
  metrics_.gauge("vgen_tune_leases", "Compute leases (threads) per device the runtime runs with", labels)
      .set(static_cast<double>(choice_.setting.leases));
  metrics_.gauge("vgen_tune_intra_op_threads", "LibTorch intra-op threads per compute lease", labels)
      .set(static_cast<double>(choice_.setting.intra_op));
  metrics_.gauge("vgen_tune_probe_seconds", "Time the auto-tuner spent measuring at start (0: from its cache or configured)",
                 {{"model", model}, {"device", device}})
      .set(choice_.probe_s);
  metrics_.gauge("vgen_tune_searching", "1 while the auto-tuner's search goes on between jobs", {{"model", model}, {"device", device}})
      .set(search_ ? 1.0 : 0.0);
  metrics_.counter("vgen_tune_switches_total", "Times the runtime switched its batch size to what the auto-tuner found",
                   {{"model", model}, {"device", device}});
}

RuntimeTuning::~RuntimeTuning() { stop(); }

void RuntimeTuning::stop() {
  std::unique_ptr<TuneSearchThread> thread;
  {
    std::lock_guard lock(thread_mutex_);  // no poke reaches it once it is out
    thread = std::move(search_thread_);
  }
  thread.reset();  // waits for a measurement under way
}

void RuntimeTuning::jobs_changed() {
  std::lock_guard lock(thread_mutex_);  // jobs end on pipeline threads while stop() may run
  if (search_thread_) search_thread_->poke();
}

std::shared_ptr<void> RuntimeTuning::hold_device(DevicePool& pool, const std::function<bool()>& idle) const {
  if (!idle() || pool.waiting() > 0) return nullptr;
  PlacementRequest request;
  std::size_t slots = 0;
  for (const auto& d : pool.status()) {
    if (d.id != device_id_) request.avoid.push_back(d.id);
    else if (d.active > 0) return nullptr;
    else slots = d.max_concurrency;
  }
  auto leases = std::make_shared<std::vector<DeviceLease>>();
  for (std::size_t i = 0; i < slots; ++i) {
    auto lease = pool.try_acquire(request);
    if (!lease) return nullptr;  // the leases taken so far go back
    leases->push_back(std::move(*lease));
  }
  if (slots == 0 || !idle()) return nullptr;  // a job came in meanwhile: it goes first
  return leases;
}

void RuntimeTuning::continue_between_jobs(DevicePool& pool, std::function<bool()> idle, std::function<void(std::size_t)> switch_batch) {
  if (!search_) return;
  {
    std::lock_guard lock(observe_mutex_);
    switch_batch_ = switch_batch;  // observe() may switch from now on (a copy: the search thread's hook takes the original)
  }
  auto thread = std::make_unique<TuneSearchThread>(
      std::move(search_),
      TuneSearchThread::Hooks{
          .hold_device = [this, &pool, idle = std::move(idle)] { return hold_device(pool, idle); },
          .on_done = [this, switch_batch = std::move(switch_batch)](const TuneChoice& done) { search_done(done, switch_batch); },
          .on_error =
              [this](std::exception_ptr e) {
                try {
                  std::rethrow_exception(e);
                } catch (const std::exception& x) {
                  spdlog::warn("auto-tune: the search between jobs failed ({}); staying at {}", x.what(), to_string(choice_.setting));
                }
                metrics_.gauge("vgen_tune_searching", "1 while the auto-tuner's search goes on between jobs", {{"model", model_}, {"device", device_}})
                    .set(0);
              },
          .idle_grace = std::chrono::duration<double>(1.0),
          // A job that arrives waits at most for one measurement: none estimated above the first wait.
          .max_step = std::chrono::duration<double>(std::max(first_wait_s_, 0.0))});
  std::lock_guard lock(thread_mutex_);  // resumed jobs may be ending already
  search_thread_ = std::move(thread);
}

// On the search thread, once the search is over (its choice cached).
void RuntimeTuning::search_done(const TuneChoice& done, const std::function<void(std::size_t)>& switch_batch) {
  const Labels ids{{"model", model_}, {"device", device_}};
  // Last of all, when everything below is visible (its log line, the switch and its counter): a
  // reader that sees the search over sees what it did.
  struct SearchingOff {
    MetricsRegistry& metrics;
    const Labels& ids;
    ~SearchingOff() { metrics.gauge("vgen_tune_searching", "1 while the auto-tuner's search goes on between jobs", ids).set(0); }
  } searching_off{metrics_, ids};
  metrics_.gauge("vgen_tune_probe_seconds", "Time the auto-tuner spent measuring at start (0: from its cache or configured)", ids)
      .set(done.probe_s);
  // The device threads are made: only the batch can change now, to the best with this split.
  const auto here = AutoTuner::best_with_split(done, choice_.setting.leases, choice_.setting.intra_op);
  const auto batch = here ? std::min(here->batch, batch_limit_) : choice_.setting.batch;
  const bool split_differs = !(done.setting.leases == choice_.setting.leases && done.setting.intra_op == choice_.setting.intra_op);
  spdlog::info("auto-tune: search done for model '{}' on {}: {} ({} settings, {:.1f} s measuring; cached in {}); {}{}", model_,
               device_, to_string(done.setting), done.samples.size(), done.probe_s,
               done.file.empty() ? std::string("nowhere") : done.file.string(),
               batch != current_batch() ? "switching to batch " + std::to_string(batch) + " from the next group"
                                         : "batch " + std::to_string(batch) + " stays",
               split_differs ? "; its split applies from the next start" : "");
  {
    std::lock_guard lock(observe_mutex_);
    if (batch == running_batch_) return;
    running_batch_ = batch;
  }
  switch_batch(batch);
  metrics_.gauge("vgen_tune_max_batch", "Jobs per model call the runtime runs with (auto-tuned or configured)",
                 {{"model", model_}, {"device", device_}, {"source", choice_.source}})
      .set(static_cast<double>(batch));
  metrics_.counter("vgen_tune_switches_total", "Times the runtime switched its batch size to what the auto-tuner found", ids).inc();
}

void RuntimeTuning::observe(BatchKind kind, const std::string& key, std::size_t jobs, double seconds) noexcept {
  if (kind != BatchKind::denoise || denoise_key_.empty() || key != denoise_key_ || jobs == 0) return;
  try {
    observe_denoise(jobs, seconds);
  } catch (const std::exception& e) {  // on a compute thread, between a group's calls: never throw into it
    spdlog::warn("auto-tune: could not learn from a running job ({})", e.what());
  }
}

void RuntimeTuning::observe_denoise(std::size_t jobs, double seconds) {
  std::unique_lock lock(observe_mutex_);
  if (!switch_batch_) return;  // not between jobs yet (or stopped)
  auto& calls = observed_[jobs];
  // The first call at a size is left out: a new input shape may cost a TorchScript profiling run.
  if (calls.size() > kObservedCalls) return;  // this size has its sample
  calls.push_back(seconds);
  if (calls.size() <= kObservedCalls) return;
  std::vector<double> timed(calls.begin() + 1, calls.end());
  std::sort(timed.begin(), timed.end());
  const double step_s = timed.size() % 2 ? timed[timed.size() / 2] : (timed[timed.size() / 2 - 1] + timed[timed.size() / 2]) / 2;
  lock.unlock();
  std::lock_guard thread_lock(thread_mutex_);  // the search lives as long as its thread
  if (!search_thread_) return;
  auto& search = search_thread_->search();
  const auto& run = choice_.setting;
  if (!search.observe(TuneSample{.setting = {jobs, run.leases, run.intra_op}, .step_s = step_s})) return;
  spdlog::info("auto-tune: observed {} on running jobs: {:.3f} s per denoiser call", to_string(TuneSetting{jobs, run.leases, run.intra_op}), step_s);
  const auto next = search.next_batch_with_split(run.leases, run.intra_op);
  if (next && *next <= batch_limit_) {
    switch_to(*next, "trying it on running jobs");
    return;
  }
  if (const auto best = search.best_with_split(run.leases, run.intra_op))
    switch_to(std::min(best->batch, batch_limit_), "the best measured with " + std::to_string(run.leases) + " lease(s)");
}

// Any thread; the next groups take it (ModelSet::set_max_batch).
void RuntimeTuning::switch_to(std::size_t batch, const std::string& why) {
  std::function<void(std::size_t)> switch_batch;
  {
    std::lock_guard lock(observe_mutex_);
    if (batch == running_batch_ || !switch_batch_) return;
    running_batch_ = batch;
    switch_batch = switch_batch_;
  }
  spdlog::info("auto-tune: batch {} for model '{}' on {} from the next group ({})", batch, model_, device_, why);
  switch_batch(batch);
  const Labels ids{{"model", model_}, {"device", device_}};
  metrics_.gauge("vgen_tune_max_batch", "Jobs per model call the runtime runs with (auto-tuned or configured)",
                 {{"model", model_}, {"device", device_}, {"source", choice_.source}})
      .set(static_cast<double>(batch));
  metrics_.counter("vgen_tune_switches_total", "Times the runtime switched its batch size to what the auto-tuner found", ids).inc();
}

std::size_t RuntimeTuning::current_batch() {
  std::lock_guard lock(observe_mutex_);
  return running_batch_;
}

std::string RuntimeTuning::key() {
  if (!probe_) return {};
  std::lock_guard lock(mutex_);
  return probe_->key();
}

void RuntimeTuning::on_capped(const std::string& batcher_key, std::size_t cap) noexcept {
  try {
    cap_cached(batcher_key, cap);
  } catch (const std::exception& e) {  // the Batcher calls this while it ends a failed group: never throw into it
    spdlog::warn("auto-tune: could not lower the cached batch after out of memory ({})", e.what());
  }
}

void RuntimeTuning::cap_cached(const std::string& batcher_key, std::size_t cap) {
  // A cache hit computes the key here, once: it prepares one probe job on this thread (out of
  // memory is rare, and the key needs the family's own group key).
  if (!tuner_ || batcher_key != key()) return;
  if (tuner_->cap_batch(tuner_key_, cap) > 0)
    spdlog::info("auto-tune: out of memory capped model '{}' at batch {} on {}; the cached choice follows", model_, cap, device_);
  const Labels labels{{"model", model_}, {"device", device_}, {"source", choice_.source}};
  metrics_.gauge("vgen_tune_max_batch", "Jobs per model call the runtime runs with (auto-tuned or configured)", labels)
      .set(static_cast<double>(std::min(cap, choice_.setting.batch)));
}

}  // namespace vgen
