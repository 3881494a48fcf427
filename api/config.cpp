#include "api/config.hpp"

#include "runtime/device_pool.hpp"
#include "api/journal.hpp"
#include "runtime/errors.hpp"
#include "stages/job_spec.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <unistd.h>

namespace vgen {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

// Walks one JSON object, checking every key against a table of setters; errors carry the path.
class Reader {
 public:
  Reader(std::string origin, fs::path base_dir) : origin_(std::move(origin)), base_dir_(std::move(base_dir)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw_error(ErrorKind::invalid_argument, origin_ + ": " + path + ": " + what);
  }

  using Setter = std::function<void(const json::value&, const std::string& path)>;
  void object(const json::value& v, const std::string& path, const std::map<std::string, Setter>& keys) const {
    if (!v.is_object()) fail(path.empty() ? "(top level)" : path, "must be an object");
    for (const auto& kv : v.get_object()) {
      const std::string key(kv.key());
      const auto sub = path.empty() ? key : path + "." + key;
      const auto it = keys.find(key);
      if (it == keys.end()) {
        std::string known;
        for (const auto& [k, _] : keys) known += (known.empty() ? "" : ", ") + k;
        fail(sub, "unknown key (known: " + known + ")");
      }
      it->second(kv.value(), sub);
    }
  }

  std::int64_t integer(const json::value& v, const std::string& path, std::int64_t min, std::int64_t max) const {
    auto out_of_range = [&](const std::string& got) {
      fail(path, "must be between " + std::to_string(min) + " and " + std::to_string(max) + " (got " + got + ")");
    };
    std::int64_t x = 0;
    if (v.is_int64()) x = v.get_int64();
    else if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(max)) x = static_cast<std::int64_t>(v.get_uint64());
    else if (v.is_double() && std::trunc(v.get_double()) == v.get_double()) {
      // Range-check while still a double: converting one outside int64 (1e300, or the inf
      // that 1e400 parses to) is undefined behaviour (found by tests/fuzz, fuzz_config).
      if (v.get_double() < static_cast<double>(min) || v.get_double() > static_cast<double>(max))
        out_of_range(json::serialize(v));
      x = static_cast<std::int64_t>(v.get_double());
    } else fail(path, "must be an integer (got " + json::serialize(v) + ")");
    if (x < min || x > max) out_of_range(std::to_string(x));
    return x;
  }
  double number(const json::value& v, const std::string& path, double min, double max) const {
    if (!v.is_number()) fail(path, "must be a number (got " + json::serialize(v) + ")");
    const double x = v.to_number<double>();
    if (!(x >= min && x <= max))
      fail(path, "must be between " + std::to_string(min) + " and " + std::to_string(max) + " (got " + json::serialize(v) + ")");
    return x;
  }
  bool boolean(const json::value& v, const std::string& path) const {
    if (!v.is_bool()) fail(path, "must be true or false (got " + json::serialize(v) + ")");
    return v.get_bool();
  }
  std::string string(const json::value& v, const std::string& path, bool allow_empty = false) const {
    if (!v.is_string()) fail(path, "must be a string (got " + json::serialize(v) + ")");
    std::string s(v.get_string());
    if (!allow_empty && s.empty()) fail(path, "must not be empty");
    return s;
  }
  fs::path path(const json::value& v, const std::string& key_path) const {
    fs::path p = string(v, key_path);
    return p.is_absolute() ? p : (base_dir_ / p).lexically_normal();
  }

 private:
  std::string origin_;
  fs::path base_dir_;
};

template <class T>
Reader::Setter count(const Reader& r, T& out, std::int64_t min, std::int64_t max) {
  return [&r, &out, min, max](const json::value& v, const std::string& p) { out = static_cast<T>(r.integer(v, p, min, max)); };
}
// A count, or "auto" (RuntimeConfig::kAuto).
template <class T>
Reader::Setter count_or_auto(const Reader& r, T& out, std::int64_t min, std::int64_t max) {
  return [&r, &out, min, max](const json::value& v, const std::string& p) {
    if (v.is_string() && v.get_string() == "auto") out = static_cast<T>(RuntimeConfig::kAuto);
    else if (v.is_string()) r.fail(p, "must be \"auto\" or an integer (got " + json::serialize(v) + ")");
    else out = static_cast<T>(r.integer(v, p, min, max));
  };
}
// true, false or "auto" (unset).
Reader::Setter bool_or_auto(const Reader& r, std::optional<bool>& out) {
  return [&r, &out](const json::value& v, const std::string& p) {
    if (v.is_string() && v.get_string() == "auto") out.reset();
    else if (!v.is_bool()) r.fail(p, "must be true, false or \"auto\" (got " + json::serialize(v) + ")");
    else out = v.as_bool();
  };
}
// A list of strings, or "auto" (empty).
Reader::Setter strings_or_auto(const Reader& r, std::vector<std::string>& out) {
  return [&r, &out](const json::value& v, const std::string& p) {
    out.clear();
    if (v.is_string() && v.get_string() == "auto") return;
    if (!v.is_array()) r.fail(p, "must be a list of names or \"auto\" (got " + json::serialize(v) + ")");
    for (std::size_t i = 0; i < v.get_array().size(); ++i)
      out.push_back(r.string(v.get_array()[i], p + "[" + std::to_string(i) + "]"));
  };
}
Reader::Setter seconds(const Reader& r, std::chrono::seconds& out, std::int64_t min, std::int64_t max) {
  return [&r, &out, min, max](const json::value& v, const std::string& p) { out = std::chrono::seconds(r.integer(v, p, min, max)); };
}
Reader::Setter millis(const Reader& r, std::chrono::milliseconds& out, std::int64_t min, std::int64_t max) {
  return [&r, &out, min, max](const json::value& v, const std::string& p) { out = std::chrono::milliseconds(r.integer(v, p, min, max)); };
}

// Whole MiB into a byte count (config keys "*.mb" / "max_mb" over components' byte sizes).
template <class T>
Reader::Setter mebibytes(const Reader& r, T& bytes, std::int64_t min, std::int64_t max) {
  return [&r, &bytes, min, max](const json::value& v, const std::string& p) { bytes = static_cast<T>(r.integer(v, p, min, max)) << 20; };
}

// "stages": one object per stage the model set declares (the map's keys); any other name is an
// unknown key.
Reader::Setter stages(const Reader& r, StageOptionsMap& stages) {
  return [&r, &stages](const json::value& v, const std::string& p) {
    std::map<std::string, Reader::Setter> keys;
    for (auto& [name, s] : stages)
      keys.emplace(name, [&r, &s](const json::value& sv, const std::string& sp) {
        r.object(sv, sp, {{"workers", count(r, s.workers, 1, 256)}, {"queue", count(r, s.queue, 1, 1'000'000)}});
      });
    r.object(v, p, keys);
  };
}

}  // namespace

RuntimeConfig apply_config(RuntimeConfig c, const json::object& root, const std::string& origin, const fs::path& base_dir) {
  Reader r(origin, base_dir);
  const json::value top(root);
  r.object(top, "", {
      {"model", [&](const json::value& v, const std::string& p) { c.model = v.is_null() ? fs::path() : r.path(v, p); }},
      {"models", [&](const json::value& v, const std::string& p) {
         if (!v.is_object()) r.fail(p, "must be an object of model name -> package directory");
         c.models.clear();
         for (const auto& kv : v.get_object()) {
           const std::string name(kv.key()), at = p + "." + name;
           try {
             checked_output_name(name, "model name");
           } catch (const Error& e) {
             r.fail(at, e.what());
           }
           c.models.emplace_back(name, r.path(kv.value(), at));
         }
       }},
      {"devices", [&](const json::value& v, const std::string& p) { c.devices = r.string(v, p); }},
      {"device_policy", [&](const json::value& v, const std::string& p) {
         c.device_policy = r.string(v, p);
         const auto known = placement_policy_names();  // the registry decides, not a list here
         if (std::find(known.begin(), known.end(), c.device_policy) == known.end()) {
           std::string names;
           for (const auto& n : known) names += (names.empty() ? "" : ", ") + n;
           r.fail(p, "must be one of " + names + " (got '" + c.device_policy + "')");
         }
       }},
      {"output_dir", [&](const json::value& v, const std::string& p) { c.output_dir = r.path(v, p); }},
      {"lora_dir", [&](const json::value& v, const std::string& p) { c.loras.dir = v.is_null() ? fs::path() : r.path(v, p); }},
      {"warmup", [&](const json::value& v, const std::string& p) { c.warmup = r.boolean(v, p); }},
      {"model_backend", [&](const json::value& v, const std::string& p) {
         auto& o = c.model_backend;
         r.object(v, p, {{"torchscript_gpu_fusion", bool_or_auto(r, o.torchscript_gpu_fusion)},
                         {"torchscript_gpu_optimize", bool_or_auto(r, o.torchscript_gpu_optimize)},
                         {"attention", strings_or_auto(r, o.attention)},
                         {"cuda_graphs", [&](const json::value& g, const std::string& gp) {  // "auto" is off
                            std::optional<bool> on;
                            bool_or_auto(r, on)(g, gp);
                            o.cuda_graphs = on.value_or(false);
                          }}});
         try {
           check_model_backend_options(o);
         } catch (const Error& e) {
           r.fail(p, e.what());
         }
       }},
      {"live", [&](const json::value& v, const std::string& p) {
         r.object(v, p, {{"max_total_mb", mebibytes(r, c.live_max_total_bytes, 1, 1'000'000)}});
       }},
      {"journal", [&](const json::value& v, const std::string& p) { c.journal = v.is_null() ? fs::path() : r.path(v, p); }},
      {"threads", [&](const json::value& v, const std::string& p) {
         r.object(v, p, {{"io", count(r, c.io_threads, 1, 64)},
                         {"per_device", count_or_auto(r, c.threads_per_device, 1, 64)},
                         {"per_gpu", count(r, c.threads_per_gpu, 1, 8)},
                         {"codec", count(r, c.codec_threads, 1, 64)},
                         {"intra_op", count_or_auto(r, c.intra_op_threads, 0, 256)},
                         {"spin_us", count(r, c.spin_us, 0, 100000)}});
       }},
      {"stages", stages(r, c.stages)},
      {"batching", [&](const json::value& v, const std::string& p) {
         auto& b = c.batching;
         r.object(v, p, {{"max_batch", count_or_auto(r, b.max_batch, 1, 256)}, {"max_decode_batch", count_or_auto(r, b.max_decode_batch, 1, 256)},
                         {"wait_ms", millis(r, b.wait, 0, 60'000)},
                         {"join_running", [&](const json::value& j, const std::string& jp) { b.join_running = r.boolean(j, jp); }}});
       }},
      {"tune", [&](const json::value& v, const std::string& p) {
         r.object(v, p, {{"budget_s", [&](const json::value& b, const std::string& bp) { c.tune.budget_s = r.number(b, bp, 0.0, 86400.0); }},
                         {"first_wait_s", [&](const json::value& b, const std::string& bp) { c.tune.first_wait_s = r.number(b, bp, 0.0, 86400.0); }},
                         {"dir", [&](const json::value& d, const std::string& dp) { c.tune.dir = d.is_null() ? fs::path() : r.path(d, dp); }},
                         {"max_batch", count(r, c.tune.max_batch, 1, 256)}});
       }},
      {"cache", [&](const json::value& v, const std::string& p) {
         r.object(v, p, {
             {"text", [&](const json::value& t, const std::string& tp) {
                r.object(t, tp, {{"entries", count(r, c.text_cache.entries, 0, 1'000'000)},
                                 {"ttl_s", seconds(r, c.text_cache.ttl, 1, 365 * 86400)}});
              }},
             {"loras", [&](const json::value& t, const std::string& tp) {
                r.object(t, tp, {{"mb", mebibytes(r, c.loras.cache_bytes, 0, 1'000'000)}});
              }},
             {"results", [&](const json::value& t, const std::string& tp) {
                r.object(t, tp, {{"entries", count(r, c.result_cache_entries, 0, 10'000'000)},
                                 {"ttl_s", seconds(r, c.result_cache_ttl, 1, 365 * 86400)}});
              }},
             {"base_frames", [&](const json::value& t, const std::string& tp) {
                r.object(t, tp, {{"mb", mebibytes(r, c.base_frames.max_bytes, 0, 1'000'000)},
                                 {"ttl_s", seconds(r, c.base_frames.ttl, 1, 365 * 86400)}});
              }},
         });
       }},
      {"retry", [&](const json::value& v, const std::string& p) {
         r.object(v, p, {{"attempts", count(r, c.retry_attempts, 1, 100)},
                         {"initial_backoff_ms", millis(r, c.retry_initial_backoff, 0, 3'600'000)},
                         {"max_backoff_ms", millis(r, c.retry_max_backoff, 0, 3'600'000)},
                         {"multiplier", [&](const json::value& m, const std::string& mp) { c.retry_multiplier = r.number(m, mp, 1.0, 100.0); }}});
         if (c.retry_max_backoff < c.retry_initial_backoff) r.fail(p + ".max_backoff_ms", "must be >= initial_backoff_ms");
       }},
      {"encoder", [&](const json::value& v, const std::string& p) {
         auto& e = c.encoder;
         r.object(v, p, {{"crf", count(r, e.crf, 0, 63)},
                         {"preset", [&](const json::value& s, const std::string& sp) { e.preset = r.string(s, sp); }},
                         {"threads", count(r, e.threads, 1, 64)},
                         {"keyframe_interval_s", [&](const json::value& k, const std::string& kp) { e.keyframe_interval_s = r.number(k, kp, 0.01, 3600.0); }}});
       }},
      {"job_ttl_s", seconds(r, c.job_ttl, 1, 365 * 86400)},
      {"images", [&](const json::value& v, const std::string& p) {
         r.object(v, p, {{"max_bytes", count(r, c.images.max_bytes, 1, std::int64_t{1} << 30)},
                         {"max_pixels", count(r, c.images.max_pixels, 1, std::int64_t{1} << 30)}});
       }},
      {"videos", [&](const json::value& v, const std::string& p) {
         r.object(v, p, {{"max_bytes", count(r, c.videos.max_bytes, 1, std::int64_t{1} << 32)},
                         {"max_frames", count(r, c.videos.max_frames, 1, 100000)},
                         {"max_pixels", count(r, c.videos.max_pixels, 1, std::int64_t{1} << 28)},
                         {"max_seconds", [&](const json::value& n, const std::string& np) { c.videos.max_seconds = r.number(n, np, 0.001, 86400.0); }}});
       }},
      {"post", [&](const json::value& v, const std::string& p) {
         auto& o = c.post;
         r.object(v, p, {{"max_side", count(r, o.max_side, 16, 16384)},
                         {"interpolator", [&](const json::value& s, const std::string& sp) { o.interpolator = s.is_null() ? std::string() : r.string(s, sp); }},
                         {"interpolate_model", [&](const json::value& m, const std::string& mp) { o.interpolate_model = m.is_null() ? fs::path() : r.path(m, mp); }},
                         {"interpolate_batch", count(r, o.interpolate_batch, 1, 256)},
                         {"upscaler", [&](const json::value& s, const std::string& sp) { o.upscaler = s.is_null() ? std::string() : r.string(s, sp); }},
                         {"upscale_model", [&](const json::value& m, const std::string& mp) { o.upscale_model = m.is_null() ? fs::path() : r.path(m, mp); }},
                         {"tile", count(r, o.tile, 0, 16384)},
                         {"tile_overlap", count(r, o.tile_overlap, 0, 1024)},
                         {"threads", count(r, c.post_threads, 1, 64)}});
       }},
      {"preview_every", [&](const json::value& v, const std::string& p) {
         c.preview_every = v.is_null() ? std::nullopt : std::optional<int>(static_cast<int>(r.integer(v, p, 0, 100'000)));
       }},
      {"quarantine_after", count(r, c.quarantine_after, 0, 1000)},
      {"priority_aging_ms", millis(r, c.priority_aging, 1, 86'400'000)},
      {"checkpoints", [&](const json::value& v, const std::string& p) {
         auto& k = c.checkpoints;
         r.object(v, p, {{"every_steps", count(r, k.every_steps, 0, 100'000)},
                         {"every_seconds", [&](const json::value& s, const std::string& sp) { k.every_seconds = r.number(s, sp, 0.0, 86400.0); }},
                         {"min_steps", count(r, k.min_steps, 1, 100'000)},
                         {"max_mb", mebibytes(r, k.max_bytes, 1, 1 << 24)},
                         {"dir", [&](const json::value& s, const std::string& sp) { k.dir = r.path(s, sp); }}});
       }},
      {"job_store", [&](const json::value& v, const std::string& p) {
         c.job_store = r.string(v, p);
         register_builtin_job_stores();  // the registry decides which kinds exist
         if (!job_stores().contains(c.job_store)) r.fail(p, "unknown job store '" + c.job_store + "' (known: " + job_stores().known() + ")");
       }},
      {"queue", [&](const json::value& v, const std::string& p) {
         if (!v.is_object()) r.fail(p, "must be an object");
         c.queue = parse_queue_config(v.get_object(), origin + ": ", c.queue);
       }},
      {"faults", [&](const json::value& v, const std::string& p) {
         if (!v.is_object()) r.fail(p, "must be an object");
         c.faults = parse_fault_plan(v.get_object(), origin + ": " + p);
       }},
      {"webhooks", [&](const json::value& v, const std::string& p) {
         if (!v.is_object()) r.fail(p, "must be an object");
         c.webhooks = parse_webhook_options(v.get_object(), origin, base_dir, c.webhooks);
       }},
      {"service", [&](const json::value& v, const std::string& p) {
         r.object(v, p, {
             {"listen", [&](const json::value& s, const std::string& sp) {
                c.service.listen = r.string(s, sp);
                if (c.service.listen.rfind(':') == std::string::npos) r.fail(sp, "must be HOST:PORT (got '" + c.service.listen + "')");
              }},
             {"max_body_bytes", count(r, c.service.max_body_bytes, 64, 64 << 20)},
             {"token", [&](const json::value& s, const std::string& sp) { c.service.token = r.string(s, sp, true); }},
             {"max_connections", count(r, c.service.max_connections, 1, 100'000)},
         });
       }},
  });
  return c;
}

RuntimeConfig load_config(const fs::path& file) {
  const std::string origin = "config " + file.string();
  std::ifstream in(file, std::ios::binary);
  if (!in) throw_error(ErrorKind::invalid_argument, origin + ": cannot be read (missing or not a file)");
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_config(buf.str(), origin, fs::absolute(file).parent_path());
}

RuntimeConfig parse_config(std::string_view text, const std::string& origin, const fs::path& base_dir) {
  json::parse_options opts;
  opts.allow_comments = true;
  opts.allow_trailing_commas = true;
  boost::system::error_code ec;
  auto v = json::parse(text, ec, {}, opts);
  if (ec) throw_error(ErrorKind::invalid_argument, origin + ": not valid JSON (" + ec.message() + ")");
  if (!v.is_object()) throw_error(ErrorKind::invalid_argument, origin + ": must be a JSON object");
  return apply_config(RuntimeConfig{}, v.get_object(), origin, base_dir);
}

namespace {
json::value count_or_auto(std::size_t n) { return n == RuntimeConfig::kAuto ? json::value("auto") : json::value(n); }
json::value bool_or_auto(const std::optional<bool>& b) { return b ? json::value(*b) : json::value("auto"); }
}  // namespace

json::object to_json(const RuntimeConfig& c) {
  json::object stages;  // in pipeline order, as the model set runs them
  auto stage = [&stages](const std::string& name, const StageOptions& s) { stages[name] = json::object{{"workers", s.workers}, {"queue", s.queue}}; };
  for (const auto& name : stage_names())
    if (const auto it = c.stages.find(name); it != c.stages.end()) stage(name, it->second);
  for (const auto& [name, s] : c.stages)
    if (!stages.contains(name)) stage(name, s);
  return json::object{
      {"model", c.model.string()},
      {"models", [&] {
         json::object o;
         for (const auto& [n, dir] : c.models) o[n] = dir.string();
         return o;
       }()},
      {"devices", c.devices},
      {"device_policy", c.device_policy},
      {"output_dir", c.output_dir.string()},
      {"lora_dir", c.loras.dir.empty() ? json::value(nullptr) : json::value(c.loras.dir.string())},  // unset: null, as journal
      {"journal", c.journal.empty() ? json::value(nullptr) : json::value(c.journal.string())},
      {"threads", {{"io", c.io_threads}, {"per_device", count_or_auto(c.threads_per_device)},
                   {"per_gpu", c.threads_per_gpu}, {"codec", c.codec_threads},
                   {"intra_op", count_or_auto(c.intra_op_threads)}, {"spin_us", c.spin_us}}},
      {"stages", std::move(stages)},
      {"batching", {{"max_batch", count_or_auto(c.batching.max_batch)}, {"max_decode_batch", count_or_auto(c.batching.max_decode_batch)},
                    {"wait_ms", c.batching.wait.count()},
                    {"join_running", c.batching.join_running}}},
      {"tune", {{"budget_s", c.tune.budget_s}, {"first_wait_s", c.tune.first_wait_s}, {"dir", c.tune.dir.empty() ? json::value(nullptr) : json::value(c.tune.dir.string())},
                {"max_batch", c.tune.max_batch}}},
      {"warmup", c.warmup},
      {"model_backend", {{"torchscript_gpu_fusion", bool_or_auto(c.model_backend.torchscript_gpu_fusion)},
                         {"torchscript_gpu_optimize", bool_or_auto(c.model_backend.torchscript_gpu_optimize)},
                         {"attention", c.model_backend.attention.empty() ? json::value("auto")
                                                                         : json::value_from(c.model_backend.attention)},
                         {"cuda_graphs", c.model_backend.cuda_graphs}}},
      {"live", {{"max_total_mb", c.live_max_total_bytes >> 20}}},
      {"cache", {{"text", {{"entries", c.text_cache.entries}, {"ttl_s", c.text_cache.ttl.count()}}},
                 {"loras", {{"mb", c.loras.cache_bytes >> 20}}},
                 {"results", {{"entries", c.result_cache_entries}, {"ttl_s", c.result_cache_ttl.count()}}},
                 {"base_frames", {{"mb", c.base_frames.max_bytes >> 20}, {"ttl_s", c.base_frames.ttl.count()}}}}},
      {"retry", {{"attempts", c.retry_attempts}, {"initial_backoff_ms", c.retry_initial_backoff.count()},
                 {"max_backoff_ms", c.retry_max_backoff.count()}, {"multiplier", c.retry_multiplier}}},
      {"encoder", {{"crf", c.encoder.crf}, {"preset", c.encoder.preset}, {"threads", c.encoder.threads},
                   {"keyframe_interval_s", c.encoder.keyframe_interval_s}}},
      {"job_ttl_s", c.job_ttl.count()},
      {"images", {{"max_bytes", c.images.max_bytes}, {"max_pixels", c.images.max_pixels}}},
      {"videos", {{"max_bytes", c.videos.max_bytes}, {"max_frames", c.videos.max_frames}, {"max_pixels", c.videos.max_pixels},
                  {"max_seconds", c.videos.max_seconds}}},
      {"post", {{"max_side", c.post.max_side}, {"interpolator", c.post.interpolator.empty() ? json::value(nullptr) : json::value(c.post.interpolator)},
                {"interpolate_model", c.post.interpolate_model.empty() ? json::value(nullptr) : json::value(c.post.interpolate_model.string())},
                {"interpolate_batch", c.post.interpolate_batch}, {"upscaler", c.post.upscaler.empty() ? json::value(nullptr) : json::value(c.post.upscaler)},
                {"upscale_model", c.post.upscale_model.empty() ? json::value(nullptr) : json::value(c.post.upscale_model.string())},
                {"tile", c.post.tile}, {"tile_overlap", c.post.tile_overlap}, {"threads", c.post_threads}}},
      {"preview_every", c.preview_every ? json::value(*c.preview_every) : json::value(nullptr)},
      {"quarantine_after", c.quarantine_after},
      {"priority_aging_ms", c.priority_aging.count()},
      {"checkpoints", [&c] {
         json::object o{{"every_steps", c.checkpoints.every_steps}, {"every_seconds", c.checkpoints.every_seconds},
                        {"min_steps", c.checkpoints.min_steps}, {"max_mb", c.checkpoints.max_bytes >> 20}};
         if (!c.checkpoints.dir.empty()) o["dir"] = c.checkpoints.dir.string();
         return o;
       }()},
      {"job_store", c.job_store},
      {"queue", to_json(c.queue)},
      {"webhooks", to_json(c.webhooks)},
      {"service", {{"listen", c.service.listen}, {"max_body_bytes", c.service.max_body_bytes},
                   {"token", c.service.token.empty() ? "" : "(set)"}, {"max_connections", c.service.max_connections}}},
  };
}

void read_environment(RuntimeConfig& c) {
  if (const char* env = std::getenv("VGEN_FAULTS"); env && *env) {
    boost::system::error_code ec;
    auto v = json::parse(env, ec);
    if (ec || !v.is_object()) throw_error(ErrorKind::invalid_argument, "VGEN_FAULTS: must be a JSON object");
    c.faults = parse_fault_plan(v.get_object(), "VGEN_FAULTS");
  }
  if (const char* env = std::getenv("VGEN_WEBHOOK_SECRET"); env && *env)
    for (auto& e : c.webhooks.endpoints)
      if (e.secret.empty() && e.secret_file.empty()) e.secret = env;
  // As LibTorch reads it: a positive integer, else as if unset.
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env && c.intra_op_threads == RuntimeConfig::kAuto) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end == '\0' && n >= 1 && n <= 1024) c.intra_op_threads = static_cast<std::size_t>(n);
  }
}

fs::path default_model_dir() {
  if (const char* env = std::getenv("VGEN_MODEL"); env && *env) {
    fs::path p(env);
    if (!fs::is_regular_file(p / "manifest.json"))
      throw_error(ErrorKind::not_found, "VGEN_MODEL=" + p.string() + ": no model package there (no manifest.json)");
    return p;
  }
  std::vector<fs::path> candidates;
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((exe.parent_path() / ".." / "share" / "vgen" / "models" / "vgen-shapes").lexically_normal());
#ifdef VGEN_SOURCE_DIR
  candidates.push_back(fs::path(VGEN_SOURCE_DIR) / "models" / "vgen-shapes");
#endif
  std::string looked;
  for (const auto& c : candidates) {
    if (fs::is_regular_file(c / "manifest.json")) return c;
    looked += (looked.empty() ? "" : ", ") + c.string();
  }
  throw_error(ErrorKind::not_found, "no default model found (looked in " + looked + "); pass --model DIR or set VGEN_MODEL");
}

}  // namespace vgen
