// RuntimeTuning: how a Runtime turns the "auto" settings of its config (batching.max_batch,
// threads.per_device, threads.intra_op; RuntimeConfig::kAuto) into numbers, with the
// AutoTuner (stages/exec/auto_tune.hpp) measuring the loaded default model (stages/exec/tune_probe.hpp)
// on the first device, at the shape config.tune.spec gives (a job spec; empty: the package's
// defaults). Settings the config gives as numbers stay as they are and bound the search
// (apps' read_environment turns OMP_NUM_THREADS into a given threads.intra_op). The choice is
// logged (info) and exported as gauges: vgen_tune_max_batch, vgen_tune_leases, vgen_tune_intra_op_threads
// {model, device, source = probe | cache | fixed | fallback} and vgen_tune_probe_seconds.
// When the probe cannot run (e.g. an image-to-video model without an image in tune.spec), a
// warning says why and the fallback is batch 1, one lease, every core.
//
// Out of memory at run time: on_capped (the Batcher's, stages/exec/batcher.hpp) lowers the cached
// batch of the tuned shape (the next start begins there) and the max_batch gauge.
// Thread-safety: the constructor blocks for the probe (before the Runtime starts its device
// threads); on_capped may be called from any thread and never throws (after a cache hit, its
// first call prepares one probe job on the calling thread to learn the Batcher's group key).
// The probe's measured groups are freed once the choice is made.
#pragma once

#include "api/config.hpp"
#include "stages/exec/auto_tune.hpp"
#include "runtime/device_list.hpp"
#include "runtime/metrics.hpp"
#include "stages/exec/model_set.hpp"
#include "stages/exec/tune_probe.hpp"

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

  // What was chosen (source "config" when nothing was left to tune: no probe ran).
  const TuneChoice& choice() const noexcept { return choice_; }
  // The Batcher's group key of the tuned shape (empty when nothing was tuned). After a cache
  // hit, the first call prepares one probe job to compute it.
  std::string key();

  // The Batcher capped `batcher_key` at `cap` after running out of memory.
  void on_capped(const std::string& batcher_key, std::size_t cap) noexcept;

 private:
  void export_choice(const std::string& model, const std::string& device);
  void cap_cached(const std::string& batcher_key, std::size_t cap);

  std::unique_ptr<AutoTuner> tuner_;
  std::unique_ptr<TuneProbe> probe_;  // the tuned shape (its key is computed on first need)
  std::mutex mutex_;                  // guards probe_->key()
  MetricsRegistry& metrics_;
  TuneChoice choice_;
  std::string tuner_key_, model_, device_;
};

}  // namespace vgen
