// AutoTuner: picks the cross-job batch size and the compute split of a device (leases x
// intra-op threads per lease) for one job shape, by measuring, and remembers the choice.
//
// What it measures is injected (a TuneMeasure): the runtime passes one that runs the model
// package's denoiser and decoder (stages/exec/tune_probe.hpp); the unit test passes fake timings.
// The tuner only searches, scores and caches, so it needs no LibTorch and no clock of its own.
//
// Search: for each split (leases L, intra-op threads T with L x T = the device's cores,
// unless the config fixes either), batch sizes 1, 2, 4, ... up to max_batch, stopping a split's
// sweep at the first out-of-memory, once a larger batch is clearly slower (it only gets
// worse), or once it is twice as slow per job as another split at the same batch. The score is seconds per job: (steps x step time + decode time) / (batch x L) for
// many jobs (`vgen batch`, `vgen serve`); steps x step time + decode time with batch 1 for one
// job (`vgen render`). Among settings within 3 % of the best, the smallest batch and the
// fewest leases win (less memory and latency for the same speed; the probe is noisy).
// The probe is bounded: once the measured time spent passes `budget`, it stops and chooses
// among what it has.
//
// Cache: one JSON file per (key, space) in the cache folder ($XDG_CACHE_HOME/vgen/tune, else
// ~/.cache/vgen/tune), written atomically (runtime/atomic_file.hpp); the next start reads it
// instead of probing. The key names the package (its content hash), the shape and the device;
// the space adds the cores and what the config fixed. A file that is unreadable or for another
// key is ignored (probed again and rewritten). When out of memory halves a batch at run time,
// cap_batch() lowers the cached batch for that key, so later starts begin there.
//
// Thread-safety: choose() and cap_batch() may be called from any thread (a mutex guards the
// cache); choose() blocks for the probe (measure runs on the calling thread). Not cancellable.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace vgen {

struct TuneSetting {
  std::size_t batch = 1;     // jobs per model call
  std::size_t leases = 1;    // concurrent compute leases (threads.per_device)
  std::size_t intra_op = 1;  // LibTorch threads per lease (threads.intra_op)
  friend bool operator==(const TuneSetting&, const TuneSetting&) = default;
};
std::string to_string(const TuneSetting& s);  // "batch 4, 2 leases x 1 threads"

// One measurement: `leases` concurrent calls of `batch` jobs each (wall seconds per call).
struct TuneSample {
  TuneSetting setting;
  double step_s = 0;    // one denoiser call (all leases at once)
  double decode_s = 0;  // one decoder call (all leases at once)
  double spent_s = 0;   // what taking the measurement cost (counts against the budget)
  bool out_of_memory = false;
  double job_s = 0;     // the score, filled in by the tuner
};
// Measures one setting. Reports out of memory in the sample (or throws Error(out_of_memory));
// any other exception ends the probe (choose() rethrows it).
using TuneMeasure = std::function<TuneSample(const TuneSetting&)>;

// What may be tuned for one device and shape.
struct TuneSpace {
  std::size_t cores = 1;                  // compute threads the device's leases share
  std::optional<std::size_t> batch;       // fixed by the config (nullopt: tuned)
  std::optional<std::size_t> leases;      // fixed threads.per_device
  std::optional<std::size_t> intra_op;    // fixed threads.intra_op (or OMP_NUM_THREADS)
  std::size_t max_batch = 8;              // the largest batch probed
  bool one_job = false;                   // `vgen render`: batch 1, one lease, fastest single job
  int steps = 1;                          // denoising steps of the shape (weighs step vs decode)
};

struct TuneChoice {
  TuneSetting setting;
  std::string source;  // "probe", "cache" or "fixed" (nothing left to tune)
  double probe_s = 0;  // time spent measuring (0 from the cache)
  std::vector<TuneSample> samples;  // what was measured (also from the cache)
  std::filesystem::path file;       // the cache file (empty when not cached)
};

class AutoTuner {
 public:
  struct Options {
    std::filesystem::path cache_dir;  // empty: no cache (always probe)
    std::chrono::duration<double> budget{30.0};
  };
  explicit AutoTuner(Options options);

  // The setting for `key` in `space`: from the cache, else measured now (and cached).
  // Error(internal) if every candidate ran out of memory at batch 1 (nothing runs).
  TuneChoice choose(const std::string& key, const TuneSpace& space, const TuneMeasure& measure);

  // Out of memory halved a batch of `key` to `cap` at run time: cached choices for that key
  // with a larger batch are lowered to it (the files rewritten). Returns how many changed.
  std::size_t cap_batch(const std::string& key, std::size_t cap);

  // The candidate splits (leases, intra_op) for a space, in the order probed.
  static std::vector<TuneSetting> splits(const TuneSpace& space);
  // Seconds per job of a sample in a space (the score; lower is better).
  static double job_seconds(const TuneSample& sample, const TuneSpace& space);

 private:
  std::filesystem::path file_for(const std::string& key, const TuneSpace& space) const;
  std::optional<TuneChoice> read(const std::filesystem::path& file, const std::string& key, const TuneSpace& space) const;
  void write(const std::string& key, const TuneSpace& space, const TuneChoice& choice) const;

  Options options_;
  std::mutex mutex_;
  std::map<std::string, std::vector<std::pair<TuneSpace, std::filesystem::path>>> chosen_;  // key -> spaces chosen here
};

// $VGEN_TUNE_DIR, else $XDG_CACHE_HOME/vgen/tune, else $HOME/.cache/vgen/tune (absolute paths
// only); empty when none is set.
std::filesystem::path default_tune_cache_dir();

}  // namespace vgen
