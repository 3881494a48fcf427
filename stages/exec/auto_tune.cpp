#include "stages/exec/auto_tune.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/content_key.hpp"
#include "runtime/errors.hpp"

#include <boost/json.hpp>

#include <algorithm>
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
    c.source = "cache";
    c.file = file;
    if (const auto* samples = o.if_contains("samples"); samples && samples->is_array())
      for (const auto& s : samples->get_array()) {
        const auto& so = s.as_object();
        TuneSample t{.setting = setting_from(so), .step_s = number_or_zero(so, "step_s"), .decode_s = number_or_zero(so, "decode_s"),
                     .spent_s = number_or_zero(so, "spent_s")};
        t.out_of_memory = so.if_contains("out_of_memory") && so.at("out_of_memory") == json::value(true);
        t.job_s = number_or_zero(so, "job_s");
        c.samples.push_back(t);
      }
    return c;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged file: probe again and rewrite it
  }
}

void AutoTuner::write(const std::string& key, const TuneSpace& space, const TuneChoice& choice) const {
  if (choice.file.empty()) return;
  json::array samples;
  for (const auto& s : choice.samples) {
    auto o = setting_json(s.setting);
    o["step_s"] = s.step_s;
    o["decode_s"] = s.decode_s;
    o["spent_s"] = s.spent_s;
    o["out_of_memory"] = s.out_of_memory;
    o["job_s"] = s.job_s;
    samples.push_back(std::move(o));
  }
  const json::object doc{{"format", kFormat}, {"key", key}, {"space", space_json(space)},
                         {"choice", setting_json(choice.setting)}, {"probe_s", choice.probe_s}, {"samples", std::move(samples)}};
  std::error_code ec;
  fs::create_directories(choice.file.parent_path(), ec);
  write_file_atomically(choice.file, json::serialize(doc) + "\n");
}

TuneChoice AutoTuner::choose(const std::string& key, const TuneSpace& space, const TuneMeasure& measure) {
  const auto file = file_for(key, space);
  auto remember = [&] {
    if (file.empty()) return;
    std::lock_guard lock(mutex_);
    auto& list = chosen_[key];
    for (const auto& [s, f] : list)
      if (f == file) return;
    list.emplace_back(space, file);
  };
  if (!file.empty()) {
    std::optional<TuneChoice> cached;
    {
      std::lock_guard lock(mutex_);
      cached = read(file, key, space);
    }
    if (cached) {
      remember();
      return *cached;
    }
  }
  auto candidates = splits(space);
  std::vector<std::size_t> batches;
  if (space.one_job) batches = {1};
  else if (space.batch) batches = {*space.batch};
  else
    for (std::size_t b = 1; b <= std::max<std::size_t>(space.max_batch, 1); b *= 2) batches.push_back(b);

  TuneChoice choice;
  choice.source = "probe";
  choice.file = file;
  if (candidates.size() == 1 && batches.size() == 1) {  // nothing to choose: no probe, no file
    choice.setting = candidates.front();
    choice.setting.batch = batches.front();
    choice.source = "fixed";
    choice.file.clear();
    return choice;
  }
  // Breadth first (every split at batch 1, then at 2, ...), so that a budget that runs out
  // leaves every split measured at the small batches rather than one split at every batch.
  std::vector<bool> active(candidates.size(), true);
  std::vector<double> split_best(candidates.size(), std::numeric_limits<double>::infinity());
  bool over_budget = false;
  for (std::size_t round = 0; round < batches.size() && !over_budget; ++round) {
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      if (!active[c]) continue;
      const bool have_one = std::any_of(choice.samples.begin(), choice.samples.end(), [](const auto& s) { return !s.out_of_memory; });
      if (have_one && choice.probe_s >= options_.budget.count()) {
        over_budget = true;
        break;
      }
      auto setting = candidates[c];
      setting.batch = batches[round];
      TuneSample sample;
      try {
        sample = measure(setting);
      } catch (...) {  // a LibTorch allocation failure classifies as out of memory too
        if (classify(std::current_exception()) != ErrorKind::out_of_memory) throw;
        sample.out_of_memory = true;
      }
      sample.setting = setting;
      choice.probe_s += sample.spent_s;
      if (!sample.out_of_memory) sample.job_s = job_seconds(sample, space);
      choice.samples.push_back(sample);
      if (sample.out_of_memory || sample.job_s > split_best[c] * kSlower) active[c] = false;  // it only gets worse
      else split_best[c] = std::min(split_best[c], sample.job_s);
    }
    // A split twice as slow as another at the same batch will not catch up at larger ones (the
    // batch helps both); probing it further would spend the budget where it cannot win
    // (e.g. OpenMP threads on a core another process takes: 100x slower per step).
    double round_best = std::numeric_limits<double>::infinity();
    for (const auto& s : choice.samples)
      if (!s.out_of_memory && s.setting.batch == batches[round]) round_best = std::min(round_best, s.job_s);
    for (const auto& s : choice.samples)
      if (!s.out_of_memory && s.setting.batch == batches[round] && s.job_s > round_best * kDominated)
        for (std::size_t c = 0; c < candidates.size(); ++c)
          if (candidates[c].leases == s.setting.leases && candidates[c].intra_op == s.setting.intra_op) active[c] = false;
  }
  const auto* best = pick(choice.samples);
  if (!best) throw_error(ErrorKind::internal, "auto-tune: every setting ran out of memory at batch " + std::to_string(batches.front()));
  choice.setting = best->setting;
  {
    std::lock_guard lock(mutex_);
    write(key, space, choice);
  }
  remember();
  return choice;
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
