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
// A start that does not wait for the search (start()): the search runs on the caller only while
// it has cost less than `first_wait` and the next measurement is expected to end within it (its
// cost estimated from the last sample's, scaled by the batch). A measurement whose cost is not
// known yet (nothing measured or observed) is made only by a runtime that cannot learn from its
// jobs (learns_from_jobs false, e.g. choose()) or when first_wait is at least the budget (the
// whole probe up front was asked for); otherwise the start runs at the safe default at once:
// that first measurement cost 3.2-9.5 s on the medium bench package (more than the default
// first wait of 2 s), and the first jobs' own denoiser calls measure the same setting for free. The caller then runs at the best setting measured so far
// (source "partial"), or at the safe default when nothing was measured ("default": batch 1,
// two leases of half the cores, probed first), and steps the rest of the search
// (TuneSearch::step) when it can spare the device; finish() caches the result. Meanwhile the
// runtime's jobs are measurements too (TuneSearch::observe: their denoiser calls at the setting
// in use, at no cost): the search marks a setting observed as done, and offers the next batch
// of the split in use to try on real work (next_batch_with_split) until that split's sweep ends. Every step
// caches the samples so far (the file marked incomplete): a process that ends first leaves them
// to the next start, whose search replays them at no cost and measures only what is left.
//
// Cache: one JSON file per (key, space) in the cache folder ($XDG_CACHE_HOME/vgen/tune, else
// ~/.cache/vgen/tune), written atomically (runtime/atomic_file.hpp); the next start reads it
// instead of probing. The key names the package (its content hash), the shape and the device;
// the space adds the cores and what the config fixed. A file that is unreadable or for another
// key is ignored (probed again and rewritten). When out of memory halves a batch at run time,
// cap_batch() lowers the cached batch for that key, so later starts begin there.
//
// Thread-safety: choose(), start() and cap_batch() may be called from any thread (a mutex guards
// the cache); they block for what they measure (measure runs on the calling thread). The cache
// writes of TuneSearch::observe (called on the runtime's compute threads, between a group's
// denoiser calls) are handed to the tuner's writer thread, coalesced per file (only the latest
// state is written); the destructor writes what is left, so the last state is never lost at a
// clean shutdown. step() and finish() write on their caller's thread (the search's own). A
// TuneSearch is stepped by one thread at a time; current() may be read from any thread. Not
// cancellable: a measurement under way is waited for.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
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
  // Observed on running jobs (TuneSearch::observe), not measured: costs nothing. Its step_s is one
  // call of the runtime's (scored as if every lease ran one at once, as a measurement does; a call
  // beside an idle lease is a little optimistic); its decode_s is an estimate the search keeps up to date
  // (decode seconds per job of the measured samples, same split first, times the batch; 0 while
  // nothing was measured: then every sample is observed, and a per-job constant does not reorder
  // them), so that observed and measured samples score alike.
  bool observed = false;
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
  // What one measurement costs in denoiser calls (the measure's warm-up, timed calls and decode):
  // a measurement's cost is estimated from an observed sample's step time with it.
  double measure_calls = 4;
};

struct TuneChoice {
  TuneSetting setting;
  // "probe", "cache" or "fixed" (nothing left to tune); while a search goes on (start()):
  // "partial" (the best measured so far) or "default" (nothing measured yet).
  std::string source;
  double probe_s = 0;  // time spent measuring (0 from the cache; a search resumed from an earlier start's counts that one's)
  std::vector<TuneSample> samples;  // what was measured (also from the cache)
  std::filesystem::path file;       // the cache file (empty when not cached)
};

class AutoTuner;

// One search for a (key, space), one measurement per step (see above). Made by AutoTuner::start;
// holds the measure and refers to its AutoTuner (both must outlive it).
class TuneSearch {
 public:
  // `prior`: the samples an earlier start cached (replayed), which cost it `prior_s`.
  TuneSearch(AutoTuner& tuner, std::string key, TuneSpace space, TuneMeasure measure, std::vector<TuneSample> prior = {},
             double prior_s = 0);

  // Measures the next setting (the samples an earlier start cached count from construction, at no
  // cost, and settings that have a sample are passed over) and caches the samples so far; false once the search is over (every split swept, or
  // the budget spent). Blocks for the measurement. Rethrows what measure throws (not out of memory).
  bool step();
  bool done() const;
  // The next setting and its expected cost in seconds (0 for a replayed one, infinity before any
  // measurement; nullopt when over).
  std::optional<std::pair<TuneSetting, double>> next() const;
  // What to run with now: the best measured so far ("partial"), else the safe default ("default").
  TuneChoice current() const;
  // The best measured setting with this split (leases, intra_op): what a runtime that cannot
  // change its split while it runs may switch to. nullopt when none was measured.
  std::optional<TuneSetting> best_with_split(std::size_t leases, std::size_t intra_op) const;
  // The search is over: its choice (source "probe"), cached. Error(internal) if every setting
  // ran out of memory.
  TuneChoice finish();

  // A sample of real work at the setting in use (sample.observed is set here; any thread): kept
  // as if measured, at no cost (the search will not measure that setting), and cached with the
  // samples so far. Ignored when that setting has a sample already or its split is not a
  // candidate. Returns whether it was kept.
  bool observe(TuneSample sample);
  // The batch to try next on real work with this split: the smallest of the sweep's batches
  // without a sample while that split's sweep goes on (not ended by a slower batch or a skip);
  // nullopt when it is over.
  std::optional<std::size_t> next_batch_with_split(std::size_t leases, std::size_t intra_op) const;
  // Gives up the next setting without measuring it (e.g. too costly to measure between jobs):
  // its split's sweep ends (larger batches cost more).
  void skip();

 private:
  std::optional<TuneSetting> next_locked() const;
  void record_locked(TuneSample sample, bool replayed);
  void end_round_locked();
  void skip_finished_locked();
  bool sampled_locked(const TuneSetting& setting) const;
  std::optional<std::size_t> split_index(const TuneSetting& setting) const;
  void rescore_observed_locked();

  AutoTuner& tuner_;
  const std::string key_;
  const TuneSpace space_;
  const TuneMeasure measure_;
  const std::vector<TuneSample> prior_;  // cached by an earlier start: replayed, not measured
  std::uint64_t version_ = 0;  // of choice_ (under mutex_): orders its saves, which may be written out of order
  std::vector<TuneSetting> candidates_;
  std::vector<std::size_t> batches_;
  mutable std::mutex mutex_;  // the fields below (step() measures outside it)
  std::size_t round_ = 0, candidate_ = 0;
  std::vector<bool> active_;
  std::vector<double> split_best_;
  bool over_budget_ = false;
  TuneChoice choice_;
};

class AutoTuner {
 public:
  struct Options {
    std::filesystem::path cache_dir;  // empty: no cache (always probe)
    std::chrono::duration<double> budget{30.0};
    // Called on the thread that writes a cache file, before it writes (tests: which thread, how often).
    std::function<void(const std::filesystem::path&)> before_write;
  };
  explicit AutoTuner(Options options);
  // Writes what observe() left to the writer thread (the last state of every file) and stops it.
  ~AutoTuner();
  // Returns once what observe() handed to the writer thread is on disk (tests; a reader in this process).
  void flush();
  AutoTuner(const AutoTuner&) = delete;
  AutoTuner& operator=(const AutoTuner&) = delete;

  // The setting for `key` in `space`: from the cache, else measured now (and cached).
  // Error(internal) if every candidate ran out of memory at batch 1 (nothing runs).
  TuneChoice choose(const std::string& key, const TuneSpace& space, const TuneMeasure& measure);

  // The setting to start with, without waiting for a whole search (see above): the cached
  // choice, the fixed one, or the best of what the search measured within `first_wait` (then
  // `search` holds the rest; null when there is nothing left to measure).
  struct Start {
    TuneChoice choice;
    std::unique_ptr<TuneSearch> search;
  };
  Start start(const std::string& key, const TuneSpace& space, TuneMeasure measure, std::chrono::duration<double> first_wait,
              bool learns_from_jobs = false);

  // The best setting of `choice`'s samples with this split (leases, intra_op); nullopt if none.
  static std::optional<TuneSetting> best_with_split(const TuneChoice& choice, std::size_t leases, std::size_t intra_op);

  // The safe default of a space: batch 1 (or the fixed batch), the split of two leases when
  // splits() has it (else its first; `vgen render`: one lease), what the config fixed kept.
  static TuneSetting safe_default(const TuneSpace& space);

  // Out of memory halved a batch of `key` to `cap` at run time: cached choices for that key
  // with a larger batch are lowered to it (the files rewritten). Returns how many changed.
  std::size_t cap_batch(const std::string& key, std::size_t cap);

  // The candidate splits (leases, intra_op) for a space, in the order probed.
  static std::vector<TuneSetting> splits(const TuneSpace& space);
  // Seconds per job of a sample in a space (the score; lower is better).
  static double job_seconds(const TuneSample& sample, const TuneSpace& space);

 private:
  friend class TuneSearch;
  std::filesystem::path file_for(const std::string& key, const TuneSpace& space) const;
  // A cached choice; a file whose search is not complete is returned with source "partial".
  std::optional<TuneChoice> read(const std::filesystem::path& file, const std::string& key, const TuneSpace& space) const;
  void write(const std::string& key, const TuneSpace& space, const TuneChoice& choice, bool complete = true) const;
  void remember(const std::string& key, const TuneSpace& space, const std::filesystem::path& file);
  // Writes `choice` now (under mutex_), unless a later state of its file (a higher `version`) was written already.
  void save(const std::string& key, const TuneSpace& space, const TuneChoice& choice, bool complete, std::uint64_t version);
  // Hands the write to the writer thread (started on first use): a later state of the same file
  // replaces one not yet written (coalesced). For callers that must not block on a file write.
  void save_later(const std::string& key, const TuneSpace& space, TuneChoice choice, bool complete, std::uint64_t version);
  void write_pending();

  struct PendingSave {
    std::string key;
    TuneSpace space;
    TuneChoice choice;
    bool complete = false;
    std::uint64_t version = 0;
  };
  Options options_;
  std::mutex mutex_;  // the cache files, chosen_ and written_
  std::map<std::string, std::vector<std::pair<TuneSpace, std::filesystem::path>>> chosen_;  // key -> spaces chosen here
  std::map<std::filesystem::path, std::uint64_t> written_;  // file -> version of the state written last
  std::mutex save_mutex_;  // the fields below
  std::condition_variable save_wake_;
  std::map<std::filesystem::path, PendingSave> pending_;  // the latest state per file, not yet written
  bool stop_saving_ = false;
  bool writing_ = false;  // the writer thread holds states taken from pending_
  std::condition_variable saved_;  // pending_ emptied and written
  std::thread writer_;
};

// $VGEN_TUNE_DIR, else $XDG_CACHE_HOME/vgen/tune, else $HOME/.cache/vgen/tune (absolute paths
// only); empty when none is set.
std::filesystem::path default_tune_cache_dir();

}  // namespace vgen
