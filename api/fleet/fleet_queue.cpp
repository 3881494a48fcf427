#include "api/fleet/fleet_queue.hpp"

#include <boost/json/parse.hpp>

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>

namespace vgen {

namespace json = boost::json;

namespace {

[[noreturn]] void bad(const std::string& origin, const std::string& key, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, origin + "queue." + key + ": " + what);
}

std::int64_t integer(const json::value& v, const std::string& origin, const std::string& key, std::int64_t lo, std::int64_t hi) {
  std::int64_t x = 0;
  if (v.is_int64()) x = v.get_int64();
  else if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(hi)) x = static_cast<std::int64_t>(v.get_uint64());
  else bad(origin, key, "must be an integer");
  if (x < lo || x > hi) bad(origin, key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " + std::to_string(x) + ")");
  return x;
}

// A name used inside subjects and stream names: no dots, wildcards or spaces.
std::string token(const json::value& v, const std::string& origin, const std::string& key, bool dots) {
  if (!v.is_string() || v.get_string().empty()) bad(origin, key, "must be a non-empty string");
  std::string s(v.get_string());
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || (dots && c == '.')))
      bad(origin, key, "'" + s + "' may hold only letters, digits, '-', '_'" + (dots ? std::string(" and '.'") : ""));
  return s;
}

std::string str(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

double num(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  if (!v) return 0;
  if (v->is_double()) return v->get_double();
  if (v->is_int64()) return static_cast<double>(v->get_int64());
  if (v->is_uint64()) return static_cast<double>(v->get_uint64());
  return 0;
}

int int_of(const json::object& o, const char* key) { return static_cast<int>(num(o, key)); }

}  // namespace

QueueConfig parse_queue_config(const json::object& o, const std::string& origin, QueueConfig c) {
  using Setter = std::function<void(const json::value&, const std::string&)>;
  const std::map<std::string, Setter> keys{
      {"url", [&](const json::value& v, const std::string& k) {
         if (!v.is_string()) bad(origin, k, "must be a string (nats://HOST:PORT)");
         c.url = std::string(v.get_string());
         if (!c.url.empty() && c.url.rfind("nats://", 0) != 0 && c.url.rfind("tls://", 0) != 0)
           bad(origin, k, "must start with nats:// or tls:// (got '" + c.url + "')");
       }},
      {"stream", [&](const json::value& v, const std::string& k) { c.stream = token(v, origin, k, false); }},
      {"subject_prefix", [&](const json::value& v, const std::string& k) { c.subject_prefix = token(v, origin, k, true); }},
      {"bucket", [&](const json::value& v, const std::string& k) { c.bucket = token(v, origin, k, false); }},
      {"cancel_subject", [&](const json::value& v, const std::string& k) { c.cancel_subject = token(v, origin, k, true); }},
      {"ack_wait_ms", [&](const json::value& v, const std::string& k) {
         c.ack_wait = std::chrono::milliseconds(integer(v, origin, k, 500, 3'600'000));
       }},
      {"backoff_ms", [&](const json::value& v, const std::string& k) {
         if (!v.is_array()) bad(origin, k, "must be an array of delays in milliseconds");
         c.backoff.clear();
         for (const auto& d : v.get_array()) c.backoff.emplace_back(integer(d, origin, k, 1, 3'600'000));
       }},
      {"max_crashes", [&](const json::value& v, const std::string& k) { c.max_crashes = static_cast<int>(integer(v, origin, k, 1, 1000)); }},
      {"max_pending", [&](const json::value& v, const std::string& k) { c.max_pending = integer(v, origin, k, 1, 1'000'000'000); }},
      {"record_ttl_s", [&](const json::value& v, const std::string& k) {
         c.record_ttl = std::chrono::seconds(integer(v, origin, k, 1, 365L * 86400));
       }},
      {"fetch_wait_ms", [&](const json::value& v, const std::string& k) {
         c.fetch_wait = std::chrono::milliseconds(integer(v, origin, k, 50, 60'000));
       }},
  };
  for (const auto& [key, value] : o) {
    const auto it = keys.find(std::string(key));
    if (it == keys.end()) {
      std::string known;
      for (const auto& [k, _] : keys) known += (known.empty() ? "" : ", ") + k;
      bad(origin, std::string(key), "unknown key (known: " + known + ")");
    }
    it->second(value, std::string(key));
  }
  return c;
}

json::object to_json(const QueueConfig& c) {
  json::array backoff;
  for (auto d : c.backoff) backoff.push_back(d.count());
  return {{"url", c.url}, {"stream", c.stream}, {"subject_prefix", c.subject_prefix}, {"bucket", c.bucket},
          {"cancel_subject", c.cancel_subject}, {"ack_wait_ms", c.ack_wait.count()}, {"backoff_ms", std::move(backoff)},
          {"max_crashes", c.max_crashes}, {"max_pending", c.max_pending}, {"record_ttl_s", c.record_ttl.count()},
          {"fetch_wait_ms", c.fetch_wait.count()}};
}

std::string subject_token(const std::string& model) {
  if (model.empty()) return "default";
  std::string out = model;
  for (auto& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) c = '_';
  return out;
}

std::string job_subject(const QueueConfig& c, const std::string& model) { return c.subject_prefix + "." + subject_token(model); }
std::string consumer_name(const QueueConfig& c, const std::string& model) { return c.stream + "_" + subject_token(model); }
std::string cancel_subject(const QueueConfig& c, const std::string& id) { return c.cancel_subject + "." + id; }

json::object to_json(const FleetRecord& r) {
  json::object o{{"id", r.id}, {"model", r.model}, {"status", r.status}, {"worker", r.worker},
                 {"step", r.step}, {"total", r.total}, {"attempts", r.attempts}, {"returned", r.returned},
                 {"writes", r.writes}, {"seconds", r.seconds}, {"submitted_unix", r.submitted_unix},
                 {"finished_unix", r.finished_unix}, {"spec", r.spec}};
  if (!r.stage.empty()) o["stage"] = r.stage;
  if (!r.output.empty()) {
    o["output"] = r.output;
    o["content_type"] = r.content_type;
    o["device"] = r.device;
  }
  if (!r.key.empty()) {
    o["key"] = r.key;
    o["output_bytes"] = r.output_bytes;
  }
  if (!r.error_kind.empty()) {
    o["error_kind"] = r.error_kind;
    o["error"] = r.error;
  }
  if (r.cancel_requested) o["cancel_requested"] = true;
  return o;
}

FleetRecord parse_fleet_record(std::string_view text) {
  boost::system::error_code ec;
  auto v = json::parse(text, ec);
  if (ec || !v.is_object()) throw_error(ErrorKind::invalid_argument, "fleet record: not a JSON object");
  const auto& o = v.get_object();
  FleetRecord r;
  r.id = str(o, "id");
  if (r.id.empty()) throw_error(ErrorKind::invalid_argument, "fleet record: no id");
  r.model = str(o, "model");
  r.status = str(o, "status");
  r.stage = str(o, "stage");
  r.worker = str(o, "worker");
  r.step = int_of(o, "step");
  r.total = int_of(o, "total");
  r.attempts = int_of(o, "attempts");
  r.returned = int_of(o, "returned");
  r.writes = int_of(o, "writes");
  r.output = str(o, "output");
  r.content_type = str(o, "content_type");
  r.device = str(o, "device");
  r.key = str(o, "key");
  r.output_bytes = static_cast<std::uint64_t>(std::max(0.0, num(o, "output_bytes")));
  r.error_kind = str(o, "error_kind");
  r.error = str(o, "error");
  r.seconds = num(o, "seconds");
  r.submitted_unix = num(o, "submitted_unix");
  r.finished_unix = num(o, "finished_unix");
  if (const auto* c = o.if_contains("cancel_requested"); c && c->is_bool()) r.cancel_requested = c->get_bool();
  if (const auto* s = o.if_contains("spec"); s && s->is_object()) r.spec = s->get_object();
  return r;
}

bool is_final(const FleetRecord& r) { return r.status == "done" || r.status == "failed" || r.status == "cancelled"; }

}  // namespace vgen
