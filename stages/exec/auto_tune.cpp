#include "stages/exec/auto_tune.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/content_key.hpp"
#include "runtime/errors.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

namespace vgen {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr int kFormat = 1;          // bump when the file's meaning changes: old files are reprobed
constexpr double kSlower = 1.10;    // a batch this much slower per job than the split's best ends its sweep
constexpr double kSameSpeed = 1.03; // settings within this of the best count as equally fast
constexpr double kDominated = 2.0;  // a split this much slower per job than another at the same batch ends its sweep

json::object space_json(const TuneSpace& s) {
  auto opt = [](const std::optional<std::size_t>& v) { return v ? json::value(*v) : json::value(nullptr); };
  return {{"cores", s.cores}, {"batch", opt(s.batch)}, {"leases", opt(s.leases)}, {"intra_op", opt(s.intra_op)},
          {"max_batch", s.max_batch}, {"one_job", s.one_job}, {"steps", s.steps}};
}

json::object setting_json(const TuneSetting& s) { return {{"batch", s.batch}, {"leases", s.leases}, {"intra_op", s.intra_op}}; }

std::size_t positive(const json::object& o, std::string_view name) {
  const auto* v = o.if_contains(name);
  if (!v || !v->is_number()) throw_error(ErrorKind::invalid_argument, std::string(name) + ": missing");
  const auto n = v->to_number<std::int64_t>();
  if (n < 1 || n > 4096) throw_error(ErrorKind::invalid_argument, std::string(name) + ": out of range");
  return static_cast<std::size_t>(n);
}

TuneSetting setting_from(const json::object& o) {
  return {positive(o, "batch"), positive(o, "leases"), positive(o, "intra_op")};
}

double number_or_zero(const json::object& o, std::string_view name) {
  const auto* v = o.if_contains(name);
  return v && v->is_number() ? v->to_number<double>() : 0.0;
}

// Best first: the lowest seconds per job; among those within kSameSpeed of it, the least
// concurrency (batch x leases), then the smallest batch.
const TuneSample* pick(const std::vector<TuneSample>& samples) {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& s : samples)
    if (!s.out_of_memory) best = std::min(best, s.job_s);
  const TuneSample* chosen = nullptr;
  for (const auto& s : samples) {
    if (s.out_of_memory || s.job_s > best * kSameSpeed) continue;
    auto weight = [](const TuneSetting& t) { return std::pair(t.batch * t.leases, t.batch); };
    if (!chosen || weight(s.setting) < weight(chosen->setting)) chosen = &s;
  }
  return chosen;
}

}  // namespace

std::string to_string(const TuneSetting& s) {
  return "batch " + std::to_string(s.batch) + ", " + std::to_string(s.leases) + (s.leases == 1 ? " lease" : " leases") +
         " x " + std::to_string(s.intra_op) + (s.intra_op == 1 ? " thread" : " threads");
}

fs::path default_tune_cache_dir() {
  if (const char* v = std::getenv("VGEN_TUNE_DIR"); v && *v == '/') return fs::path(v);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return fs::path(x) / "vgen" / "tune";
  if (const char* h = std::getenv("HOME"); h && *h == '/') return fs::path(h) / ".cache" / "vgen" / "tune";
  return {};
}

AutoTuner::AutoTuner(Options options) : options_(std::move(options)) {}

std::vector<TuneSetting> AutoTuner::splits(const TuneSpace& space) {
  const auto cores = std::max<std::size_t>(space.cores, 1);
  std::vector<TuneSetting> out;
  auto add = [&](std::size_t leases, std::size_t intra) {
    TuneSetting s{1, leases, std::max<std::size_t>(intra, 1)};
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  if (space.one_job) {  // one job runs on one lease: only the thread count of that lease varies
    const auto leases = space.leases.value_or(1);
    if (space.intra_op) add(leases, *space.intra_op);
    else
      for (std::size_t t = cores; t >= 1 && out.size() < 3; t /= 2) add(leases, t);
    return out;
  }
  if (space.leases) {
    add(*space.leases, space.intra_op.value_or(std::max<std::size_t>(1, cores / *space.leases)));
    return out;
  }
  const auto per_lease = space.intra_op.value_or(1);
  for (std::size_t l = 1; l * per_lease <= cores || l == 1; l *= 2) add(l, space.intra_op.value_or(cores / l));
  return out;
}

double AutoTuner::job_seconds(const TuneSample& s, const TuneSpace& space) {
  const double call = space.steps * s.step_s + s.decode_s;
  if (space.one_job) return call;
  return call / static_cast<double>(std::max<std::size_t>(1, s.setting.batch * s.setting.leases));
}

fs::path AutoTuner::file_for(const std::string& key, const TuneSpace& space) const {
  if (options_.cache_dir.empty()) return {};
  const json::object id{{"key", key}, {"space", space_json(space)}, {"format", kFormat}};
  return options_.cache_dir / (content_key("vgen-tune", id).hex().substr(0, 32) + ".json");
}

std::optional<TuneChoice> AutoTuner::read(const fs::path& file, const std::string& key, const TuneSpace& space) const {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  try {
    boost::system::error_code ec;
    auto v = json::parse(text.str(), ec);
    if (ec || !v.is_object()) return std::nullopt;
    const auto& o = v.get_object();
    // The name is a hash: check that it is this key's file, not a collision or an old format.
    if (o.if_contains("format") == nullptr || o.at("format") != json::value(kFormat) ||
        o.if_contains("key") == nullptr || o.at("key") != json::value(key) ||
        o.if_contains("space") == nullptr || o.at("space") != json::value(space_json(space)))
      return std::nullopt;
    TuneChoice c;
    c.setting = setting_from(o.at("choice").as_object());
    // Files written before searches could stop half way have no "complete": they were complete.
    const bool complete = !o.if_contains("complete") || o.at("complete") != json::value(false);
    c.source = complete ? "cache" : "partial";
    if (!complete) c.probe_s = number_or_zero(o, "probe_s");  // a complete file's choice costs nothing now
    c.file = file;
    if (const auto* samples = o.if_contains("samples"); samples && samples->is_array())
      for (const auto& s : samples->get_array()) {
        const auto& so = s.as_object();
        TuneSample t{.setting = setting_from(so), .step_s = number_or_zero(so, "step_s"), .decode_s = number_or_zero(so, "decode_s"),
                     .spent_s = number_or_zero(so, "spent_s")};
        t.out_of_memory = so.if_contains("out_of_memory") && so.at("out_of_memory") == json::value(true);
        t.job_s = number_or_zero(so, "job_s");
        t.observed = so.if_contains("observed") && so.at("observed") == json::value(true);
        c.samples.push_back(t);
      }
    return c;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged file: probe again and rewrite it
  }
}

void AutoTuner::write(const std::string& key, const TuneSpace& space, const TuneChoice& choice, bool complete) const {
  if (choice.file.empty()) return;
  json::array samples;
  for (const auto& s : choice.samples) {
    auto o = setting_json(s.setting);
    o["step_s"] = s.step_s;
    o["decode_s"] = s.decode_s;
    o["spent_s"] = s.spent_s;
    o["out_of_memory"] = s.out_of_memory;
    o["job_s"] = s.job_s;
    o["observed"] = s.observed;
    samples.push_back(std::move(o));
  }
  const json::object doc{{"format", kFormat}, {"key", key}, {"space", space_json(space)},
                         {"choice", setting_json(choice.setting)}, {"probe_s", choice.probe_s}, {"complete", complete},
                         {"samples", std::move(samples)}};
  std::error_code ec;
  fs::create_directories(choice.file.parent_path(), ec);
  write_file_atomically(choice.file, json::serialize(doc) + "\n");
}

void AutoTuner::remember(const std::string& key, const TuneSpace& space, const fs::path& file) {
  if (file.empty()) return;
  std::lock_guard lock(mutex_);
  auto& list = chosen_[key];
  for (const auto& [s, f] : list)
    if (f == file) return;
  list.emplace_back(space, file);
}

void AutoTuner::save(const std::string& key, const TuneSpace& space, const TuneChoice& choice, bool complete, std::uint64_t version) {
  std::lock_guard lock(mutex_);
  auto& last = written_[choice.file];
  if (version != 0 && version <= last) return;  // a later state is on disk already
  if (options_.before_write) options_.before_write(choice.file);
  write(key, space, choice, complete);
  last = std::max(last, version);
}

void AutoTuner::save_later(const std::string& key, const TuneSpace& space, TuneChoice choice, bool complete, std::uint64_t version) {
  {
    std::lock_guard lock(save_mutex_);
    auto& slot = pending_[choice.file];
    if (slot.version > version) return;
    slot = PendingSave{key, space, std::move(choice), complete, version};
    if (!writer_.joinable()) writer_ = std::thread([this] { write_pending(); });
  }
  save_wake_.notify_one();
}

// The writer thread: writes the latest pending state of each file until stopped, then what is
// left (the destructor waits for it).
void AutoTuner::write_pending() {
  std::unique_lock lock(save_mutex_);
  for (;;) {
    save_wake_.wait(lock, [&] { return stop_saving_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopped, nothing left
    auto batch = std::move(pending_);
    pending_.clear();
    writing_ = true;
    lock.unlock();
    for (const auto& [file, p] : batch) {
      try {
        save(p.key, p.space, p.choice, p.complete, p.version);
      } catch (const std::exception&) {
        // A cache that cannot be written costs a probe at the next start, nothing now.
      }
    }
    lock.lock();
    writing_ = false;
    saved_.notify_all();
  }
}

void AutoTuner::flush() {
  std::unique_lock lock(save_mutex_);
  saved_.wait(lock, [&] { return pending_.empty() && !writing_; });
}

AutoTuner::~AutoTuner() {
  {
    std::lock_guard lock(save_mutex_);
    stop_saving_ = true;
  }
  save_wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

// Two leases of half the cores each when the space allows it (else the first split): no OpenMP
// team spans every core, so a core another process takes stalls one lease, not the whole
// device (measured: one lease of two threads ran 2-7x slower than two leases of one on the
// shared 2-vCPU machine, docs/PERFORMANCE.md), while memory stays at two groups' worth.
// `vgen render` (one job) keeps one lease. Batch 1 (or the fixed batch).
TuneSetting AutoTuner::safe_default(const TuneSpace& space) {
  const auto candidates = splits(space);
  TuneSetting out = candidates.front();
  if (!space.one_job)
    for (const auto& c : candidates)
      if (c.leases == 2) out = c;
  out.batch = space.one_job ? 1 : space.batch.value_or(1);
  return out;
}

AutoTuner::Start AutoTuner::start(const std::string& key, const TuneSpace& space, TuneMeasure measure,
                                  std::chrono::duration<double> first_wait, bool learns_from_jobs) {
  const auto file = file_for(key, space);
  std::vector<TuneSample> prior;
  double prior_s = 0;
  if (!file.empty()) {
    std::optional<TuneChoice> cached;
    {
      std::lock_guard lock(mutex_);
      cached = read(file, key, space);
    }
    if (cached && cached->source == "cache") {
      remember(key, space, file);
      return {*cached, nullptr};
    }
    if (cached) {  // an earlier start's partial search
      prior = std::move(cached->samples);
      prior_s = cached->probe_s;
    }
  }
  auto search = std::make_unique<TuneSearch>(*this, key, space, std::move(measure), std::move(prior), prior_s);
  if (search->done() && search->current().samples.empty()) {  // nothing to choose: no probe, no file
    auto fixed = search->current();
    fixed.source = "fixed";
    fixed.file.clear();
    return {fixed, nullptr};
  }
  double waited = 0;
  while (const auto next = search->next()) {
    const double cost = next->second;  // 0: a replay; infinite: nothing measured yet (see the header)
    if (cost > 0 && first_wait.count() <= 0) break;
    // The jobs measure it, unless the wait covers the whole budget (the whole probe up front was asked for).
    if (!std::isfinite(cost) && learns_from_jobs && first_wait.count() < options_.budget.count()) break;
    if (std::isfinite(cost) && waited + cost > first_wait.count()) break;
    const auto before = search->current().probe_s;
    if (!search->step()) break;
    waited += search->current().probe_s - before;
  }
  if (search->done() || !search->next()) return {search->finish(), nullptr};
  return {search->current(), std::move(search)};
}

TuneChoice AutoTuner::choose(const std::string& key, const TuneSpace& space, const TuneMeasure& measure) {
  auto started = start(key, space, measure, std::chrono::duration<double>(std::numeric_limits<double>::infinity()));
  if (!started.search) return started.choice;
  while (started.search->step()) {
  }
  return started.search->finish();
}

TuneSearch::TuneSearch(AutoTuner& tuner, std::string key, TuneSpace space, TuneMeasure measure, std::vector<TuneSample> prior,
                       double prior_s)
    : tuner_(tuner), key_(std::move(key)), space_(std::move(space)), measure_(std::move(measure)), prior_(std::move(prior)) {
  choice_.probe_s = prior_s;  // the budget bounds the whole search, over every start that took part
  candidates_ = AutoTuner::splits(space_);
  // The safe default's split first: it is what runs until the search knows better, and the
  // first measurement is the one a start always makes.
  const auto safe = AutoTuner::safe_default(space_);
  std::stable_partition(candidates_.begin(), candidates_.end(),
                        [&](const TuneSetting& c) { return c.leases == safe.leases && c.intra_op == safe.intra_op; });
  if (space_.one_job) batches_ = {1};
  else if (space_.batch) batches_ = {*space_.batch};
  else
    for (std::size_t b = 1; b <= std::max<std::size_t>(space_.max_batch, 1); b *= 2) batches_.push_back(b);
  active_.assign(candidates_.size(), true);
  split_best_.assign(candidates_.size(), std::numeric_limits<double>::infinity());
  choice_.source = "default";
  choice_.setting = AutoTuner::safe_default(space_);
  choice_.file = tuner_.file_for(key_, space_);
  if (candidates_.size() == 1 && batches_.size() == 1) {  // nothing to choose
    choice_.setting = candidates_.front();
    choice_.setting.batch = batches_.front();
    over_budget_ = true;
    round_ = batches_.size();
    return;
  }
  // An earlier start's samples count at once (at no cost), not in the order the search would
  // reach them: a start runs at the best of them, even one of a batch the sweep has not reached
  // (the jobs observed it out of order).
  std::lock_guard lock(mutex_);
  for (const auto& p : prior_)
    if (!sampled_locked(p.setting) && split_index(p.setting)) record_locked(p, true);
}

// Breadth first (every split at batch 1, then at 2, ...), so that a budget that runs out
// leaves every split measured at the small batches rather than one split at every batch.
std::optional<TuneSetting> TuneSearch::next_locked() const {
  if (over_budget_ || round_ >= batches_.size() || candidate_ >= candidates_.size()) return std::nullopt;
  auto setting = candidates_[candidate_];
  setting.batch = batches_[round_];
  return setting;
}

// Moves past inactive splits and finished rounds, and stops at the budget.
void TuneSearch::skip_finished_locked() {
  auto settled = [&](std::size_t c) {  // inactive, or observed on running jobs already
    auto s = candidates_[c];
    s.batch = batches_[round_];
    return !active_[c] || sampled_locked(s);
  };
  while (round_ < batches_.size()) {
    while (candidate_ < candidates_.size() && settled(candidate_)) ++candidate_;
    if (candidate_ < candidates_.size()) break;
    end_round_locked();
    ++round_;
    candidate_ = 0;
  }
  const bool have_one = std::any_of(choice_.samples.begin(), choice_.samples.end(), [](const auto& s) { return !s.out_of_memory; });
  if (have_one && choice_.probe_s >= tuner_.options_.budget.count()) over_budget_ = true;
}

bool TuneSearch::sampled_locked(const TuneSetting& setting) const {
  return std::any_of(choice_.samples.begin(), choice_.samples.end(), [&](const TuneSample& s) { return s.setting == setting; });
}

std::optional<std::size_t> TuneSearch::split_index(const TuneSetting& setting) const {
  for (std::size_t c = 0; c < candidates_.size(); ++c)
    if (candidates_[c].leases == setting.leases && candidates_[c].intra_op == setting.intra_op) return c;
  return std::nullopt;
}

// An observed sample has no decode of its own (the runtime's decoder runs per job after the
// steps, in other groups): it gets the decode seconds per job of the measured samples (its own
// split's if one was measured, else the latest), times its batch, so that it scores like a
// measurement (review finding 10: they were compared without it, favouring the observed ones).
// Called whenever a sample comes in: a new measurement changes the estimate of every observed
// sample, and the best so far with it.
void TuneSearch::rescore_observed_locked() {
  auto per_job = [&](const TuneSetting& of) -> std::optional<double> {
    std::optional<double> any, same;
    for (const auto& s : choice_.samples) {
      if (s.observed || s.out_of_memory || s.decode_s <= 0) continue;
      const double d = s.decode_s / static_cast<double>(std::max<std::size_t>(s.setting.batch, 1));
      any = d;
      if (s.setting.leases == of.leases && s.setting.intra_op == of.intra_op) same = d;
    }
    return same ? same : any;
  };
  std::fill(split_best_.begin(), split_best_.end(), std::numeric_limits<double>::infinity());
  for (auto& s : choice_.samples) {
    if (s.out_of_memory) continue;
    if (s.observed) {
      s.decode_s = per_job(s.setting).value_or(0.0) * static_cast<double>(s.setting.batch);
      s.job_s = AutoTuner::job_seconds(s, space_);
    }
    if (const auto c = split_index(s.setting)) split_best_[*c] = std::min(split_best_[*c], s.job_s);
  }
}

// `sample` is of the next setting (measured or replayed) or, observed, of any candidate split's.
void TuneSearch::record_locked(TuneSample sample, bool replayed) {
  const auto c = split_index(sample.setting).value_or(candidate_);
  const bool is_next = next_locked() == std::optional<TuneSetting>(sample.setting);
  if (!replayed) choice_.probe_s += sample.spent_s;  // a replay's cost is in the prior probe_s
  if (!sample.out_of_memory) sample.job_s = AutoTuner::job_seconds(sample, space_);
  choice_.samples.push_back(sample);
  if (!sample.out_of_memory) {
    rescore_observed_locked();  // the new sample may be a measurement: every observed one's decode estimate follows
    sample.job_s = choice_.samples.back().job_s;
    // The sweep's test below compares it with its split's best before it.
    split_best_[c] = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i + 1 < choice_.samples.size(); ++i) {
      const auto& s = choice_.samples[i];
      if (!s.out_of_memory && split_index(s.setting) == std::optional<std::size_t>(c)) split_best_[c] = std::min(split_best_[c], s.job_s);
    }
  }
  if (sample.out_of_memory || sample.job_s > split_best_[c] * kSlower) active_[c] = false;  // it only gets worse
  else split_best_[c] = std::min(split_best_[c], sample.job_s);
  if (is_next) ++candidate_;
  if (const auto* best = pick(choice_.samples)) {
    choice_.setting = best->setting;
    choice_.source = "partial";
  }
  skip_finished_locked();
}

// A split twice as slow as another at the same batch will not catch up at larger ones (the
// batch helps both); probing it further would spend the budget where it cannot win
// (e.g. OpenMP threads on a core another process takes: 100x slower per step).
void TuneSearch::end_round_locked() {
  const auto batch = batches_[round_];
  double round_best = std::numeric_limits<double>::infinity();
  for (const auto& s : choice_.samples)
    if (!s.out_of_memory && s.setting.batch == batch) round_best = std::min(round_best, s.job_s);
  for (const auto& s : choice_.samples)
    if (!s.out_of_memory && s.setting.batch == batch && s.job_s > round_best * kDominated)
      for (std::size_t c = 0; c < candidates_.size(); ++c)
        if (candidates_[c].leases == s.setting.leases && candidates_[c].intra_op == s.setting.intra_op) active_[c] = false;
}

std::optional<std::pair<TuneSetting, double>> TuneSearch::next() const {
  std::lock_guard lock(mutex_);
  const auto setting = next_locked();
  if (!setting) return std::nullopt;
  for (const auto& p : prior_)
    if (p.setting == *setting) return std::pair(*setting, 0.0);
  // The last sample's cost, scaled by the batch (a call's cost grows about with its rows); an
  // observed sample cost nothing: a measurement costs about measure_calls of its calls.
  for (auto it = choice_.samples.rbegin(); it != choice_.samples.rend(); ++it) {
    if (it->out_of_memory) continue;
    const double cost = it->observed ? it->step_s * space_.measure_calls : it->spent_s;
    if (cost > 0)
      return std::pair(*setting, cost * static_cast<double>(setting->batch) / static_cast<double>(std::max<std::size_t>(it->setting.batch, 1)));
  }
  return std::pair(*setting, std::numeric_limits<double>::infinity());  // unknown until one is measured
}

bool TuneSearch::done() const {
  std::lock_guard lock(mutex_);
  return !next_locked();
}

bool TuneSearch::step() {
  std::optional<TuneSetting> setting;
  {
    std::lock_guard lock(mutex_);
    skip_finished_locked();
    setting = next_locked();
  }
  if (!setting) return false;
  TuneSample sample;
  bool replayed = false;
  for (const auto& p : prior_)
    if (p.setting == *setting) {
      sample = p;  // its spent_s stays: the cost estimate of the next measurement uses it
      replayed = true;
    }
  if (!replayed) {
    try {
      sample = measure_(*setting);
    } catch (...) {  // a LibTorch allocation failure classifies as out of memory too
      if (classify(std::current_exception()) != ErrorKind::out_of_memory) throw;
      sample = TuneSample{};
      sample.out_of_memory = true;
    }
  }
  sample.setting = *setting;
  TuneChoice snapshot;
  std::uint64_t version = 0;
  {
    std::lock_guard lock(mutex_);
    record_locked(sample, replayed);
    snapshot = choice_;
    version = ++version_;
  }
  if (!replayed && !snapshot.file.empty()) tuner_.save(key_, space_, snapshot, false, version);
  return true;
}

bool TuneSearch::observe(TuneSample sample) {
  sample.observed = true;
  sample.spent_s = 0;
  sample.out_of_memory = false;
  TuneChoice snapshot;
  std::uint64_t version = 0;
  {
    std::lock_guard lock(mutex_);
    // A finished search keeps its result: a late observation must not reopen (and re-save as
    // incomplete) what the cache already holds as complete.
    if (!next_locked()) return false;
    if (sampled_locked(sample.setting) || !split_index(sample.setting)) return false;
    if (std::find(batches_.begin(), batches_.end(), sample.setting.batch) == batches_.end()) return false;  // not a swept size
    record_locked(sample, false);
    snapshot = choice_;
    version = ++version_;
  }
  // On a compute thread, between a group's denoiser calls: the file write (and its fsync) goes
  // to the tuner's writer thread (review finding 11).
  if (!snapshot.file.empty()) tuner_.save_later(key_, space_, std::move(snapshot), false, version);
  return true;
}

std::optional<std::size_t> TuneSearch::next_batch_with_split(std::size_t leases, std::size_t intra_op) const {
  std::lock_guard lock(mutex_);
  const auto c = split_index(TuneSetting{1, leases, intra_op});
  if (!c || !active_[*c]) return std::nullopt;
  for (const auto b : batches_)
    if (!sampled_locked(TuneSetting{b, leases, intra_op})) return b;
  return std::nullopt;
}

void TuneSearch::skip() {
  std::lock_guard lock(mutex_);
  skip_finished_locked();
  if (!next_locked()) return;
  active_[candidate_] = false;
  skip_finished_locked();
}

TuneChoice TuneSearch::current() const {
  std::lock_guard lock(mutex_);
  return choice_;
}

std::optional<TuneSetting> TuneSearch::best_with_split(std::size_t leases, std::size_t intra_op) const {
  return AutoTuner::best_with_split(current(), leases, intra_op);
}

std::optional<TuneSetting> AutoTuner::best_with_split(const TuneChoice& choice, std::size_t leases, std::size_t intra_op) {
  std::vector<TuneSample> same;
  for (const auto& s : choice.samples)
    if (s.setting.leases == leases && s.setting.intra_op == intra_op) same.push_back(s);
  const auto* best = pick(same);
  return best ? std::optional<TuneSetting>(best->setting) : std::nullopt;
}

TuneChoice TuneSearch::finish() {
  TuneChoice out;
  std::uint64_t version = 0;
  {
    std::lock_guard lock(mutex_);
    const auto* best = pick(choice_.samples);
    if (!best)
      throw_error(ErrorKind::internal, "auto-tune: every setting ran out of memory at batch " + std::to_string(batches_.front()));
    choice_.setting = best->setting;
    choice_.source = "probe";
    out = choice_;
    version = ++version_;
  }
  if (!out.file.empty()) tuner_.save(key_, space_, out, true, version);
  tuner_.remember(key_, space_, out.file);
  return out;
}

std::size_t AutoTuner::cap_batch(const std::string& key, std::size_t cap) {
  cap = std::max<std::size_t>(cap, 1);
  std::lock_guard lock(mutex_);
  std::size_t changed = 0;
  const auto it = chosen_.find(key);
  if (it == chosen_.end()) return 0;
  for (const auto& [space, file] : it->second) {
    auto cached = read(file, key, space);
    if (!cached || cached->setting.batch <= cap) continue;
    cached->setting.batch = cap;
    write(key, space, *cached);
    ++changed;
  }
  return changed;
}

}  // namespace vgen
