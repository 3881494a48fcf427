// RuntimeTuning: how a Runtime turns the "auto" settings of its config (batching.max_batch,
// threads.per_device, threads.intra_op; RuntimeConfig::kAuto) into numbers, with the
// AutoTuner (stages/exec/auto_tune.hpp) measuring the loaded default model (stages/exec/tune_probe.hpp)
// on the first device, at the shape config.tune.spec gives (a job spec; empty: the package's
// defaults). Settings the config gives as numbers stay as they are and bound the search
// (apps' read_environment turns OMP_NUM_THREADS into a given threads.intra_op). The choice is
// logged (info) and exported as gauges: vgen_tune_max_batch, vgen_tune_leases, vgen_tune_intra_op_threads
// {model, device, source = probe | cache | fixed | fallback | partial | default} and vgen_tune_probe_seconds.
// When the probe cannot run (e.g. an image-to-video model without an image in tune.spec), a
// warning says why and the fallback is batch 1, one lease, every core.
//
// A fresh cache does not hold up the first job: the constructor measures only what its cost
// estimate (from samples an earlier start cached) fits in config.tune.first_wait_s, and nothing
// of unknown cost (AutoTuner::start with learns_from_jobs): on a fresh cache the runtime starts at
// once at the safe default ("default"; else the best so far, "partial").
// Learning from running jobs (observe(), the Batcher's on_model_call): the denoiser calls of jobs
// of the tuned shape are samples at the setting in use, at no cost (per batch size: the first
// call at a size is left out, the median of the next kObservedCalls is the step time). After
// each, the runtime tries the next batch of its split's sweep on real work, else switches to the
// best batch measured with its split (ModelSet::set_max_batch: at group boundaries; the results
// are the same at any batch), without any idle time (`vgen batch`). The samples are cached as
// they come (the next start reads them).
// continue_between_jobs() goes on with the rest of the search (other splits) on its own thread
// ("vgen-tune", TuneSearchThread), one measurement at a time, only while no job is in flight
// (poked by the Pipeline once the in-flight count has dropped), holding every lease of the tuned
// device so that a job that arrives meanwhile waits for at most that measurement, and never one
// estimated above first_wait_s (skipped). When the search is over, its choice is cached (the
// next start uses it) and the runtime switches its batch size to the best measured with the split
// it runs (the device threads, i.e. leases x intra-op threads, are made once at start, so a
// better split applies from the next start). Logged (info); vgen_tune_max_batch follows, with
// vgen_tune_switches_total and vgen_tune_searching {model, device} (1 while the search goes on).
// A search that a process leaves unfinished (`vgen batch` ends with its jobs) is cached as far
// as it went: the next start replays it and measures only the rest, again within first_wait_s.
//
// Out of memory at run time: on_capped (the Batcher's, stages/exec/batcher.hpp) lowers the cached
// batch of the tuned shape (the next start begins there) and the max_batch gauge.
// Thread-safety: the constructor blocks for the probe (the first measurement, then up to about first_wait_s; before the
// Runtime starts its device threads); on_capped may be called from any thread and never throws
// (after a cache hit, its first call prepares one probe job on the calling thread to learn the
// Batcher's group key). jobs_changed() from any thread. The search thread owns the probe while
// it runs, each measurement under the mutex key() takes, its groups freed after each (the probe's models are the runtime's, shared and re-entrant); stop() (or the
// destructor) ends it, waiting for a measurement under way, and must come before the pool, the
// models or the callbacks given to continue_between_jobs go. The probe's measured groups are
// freed once the choice is made.
#pragma once

#include "api/config.hpp"
#include "stages/exec/auto_tune.hpp"
#include "stages/exec/tune_search_thread.hpp"
#include "runtime/device_list.hpp"
#include "runtime/device_pool.hpp"
#include "runtime/metrics.hpp"
#include "stages/exec/model_set.hpp"
#include "stages/exec/tune_probe.hpp"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace vgen {

class RuntimeTuning {
 public:
  // Resolves config's kAuto settings in place (config.batching.max_batch, threads_per_device and
  // intra_op_threads are all numbers >= 1 afterwards). `cores`: the machine's (0: detect).
  RuntimeTuning(RuntimeConfig& config, const LoadedModels& models, const std::vector<DeviceSpec>& devices,
                MetricsRegistry& metrics, std::size_t cores = 0);
  ~RuntimeTuning();

  // What was chosen (source "config" when nothing was left to tune: no probe ran).
  const TuneChoice& choice() const noexcept { return choice_; }
  // The Batcher's group key of the tuned shape (empty when nothing was tuned). After a cache
  // hit, the first call prepares one probe job to compute it.
  std::string key();

  // The Batcher capped `batcher_key` at `cap` after running out of memory.
  void on_capped(const std::string& batcher_key, std::size_t cap) noexcept;

  // The largest batch the search may still switch to (ModelSetOptions::max_batch_limit); the
  // chosen batch when no search goes on.
  std::size_t batch_limit() const noexcept { return batch_limit_; }
  // Goes on with the search between jobs (nothing when none is left; see above). `pool`: the
  // runtime's devices; `idle`: no job in flight; `switch_batch`: the batch size for groups formed
  // from now on (called on the search thread). Call once.
  void continue_between_jobs(DevicePool& pool, std::function<bool()> idle, std::function<void(std::size_t)> switch_batch);
  void jobs_changed();  // a job ended (the in-flight count dropped): the search looks for a free device
  // A model call of the runtime's (the Batcher's on_model_call; compute threads): see above.
  // Never throws.
  void observe(BatchKind kind, const std::string& key, std::size_t jobs, double seconds) noexcept;
  static constexpr std::size_t kObservedCalls = 2;  // timed calls per batch size (after the first)
  void stop();          // ends the search thread (idempotent)

 private:
  std::shared_ptr<void> hold_device(DevicePool& pool, const std::function<bool()>& idle) const;
  void search_done(const TuneChoice& done, const std::function<void(std::size_t)>& switch_batch);
  void export_choice(const std::string& model, const std::string& device);
  void cap_cached(const std::string& batcher_key, std::size_t cap);
  void observe_denoise(std::size_t jobs, double seconds);
  void switch_to(std::size_t batch, const std::string& why);
  std::size_t current_batch();

  std::unique_ptr<AutoTuner> tuner_;
  std::unique_ptr<TuneProbe> probe_;  // the tuned shape (its key is computed on first need)
  std::unique_ptr<TuneSearch> search_;            // what start() left, until continue_between_jobs
  std::unique_ptr<TuneSearchThread> search_thread_;  // steps it between jobs; guarded by thread_mutex_
  std::mutex thread_mutex_;
  std::size_t batch_limit_ = 1;
  double first_wait_s_ = 2;  // config.tune.first_wait_s: also the cap of one between-jobs measurement
  std::string device_id_;  // the tuned device ("cpu:0")
  std::mutex mutex_;                  // guards probe_->key()
  MetricsRegistry& metrics_;
  TuneChoice choice_;
  std::string tuner_key_, model_, device_;
  std::string denoise_key_;  // the Batcher's group key of the tuned shape, while a search goes on
  std::mutex observe_mutex_;  // the fields below
  std::map<std::size_t, std::vector<double>> observed_;  // per batch size: call seconds, the first left out
  std::size_t running_batch_ = 1;                        // the batch set last
  std::function<void(std::size_t)> switch_batch_;
};

}  // namespace vgen
