#include "api/webhook_options.hpp"

#include "api/webhook_signature.hpp"
#include "runtime/errors.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

namespace vgen {

namespace fs = std::filesystem;
namespace json = boost::json;

bool WebhookEndpoint::wants(std::string_view type) const {
  return events.empty() || std::find(events.begin(), events.end(), type) != events.end();
}

WebhookUrl parse_webhook_url(const std::string& url, const std::string& what) {
  auto bad = [&](const std::string& why) { throw_error(ErrorKind::invalid_argument, what + ": " + why + " (got '" + url + "')"); };
  if (url.starts_with("https://"))
    bad("https:// endpoints are not supported (this build has no TLS client): use http:// to a local relay");
  constexpr std::string_view scheme = "http://";
  if (!url.starts_with(scheme)) bad("must be an http:// URL");
  const auto rest = std::string_view(url).substr(scheme.size());
  const auto slash = rest.find_first_of("/?#");
  const auto authority = rest.substr(0, slash);
  if (authority.find('@') != std::string_view::npos) bad("must not carry user information");
  WebhookUrl u;
  if (authority.starts_with("[")) {  // [v6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos) bad("unbalanced [ in the host");
    u.host = std::string(authority.substr(1, close - 1));
    const auto after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') bad("a port must follow the host after ':'");
    u.port = after.empty() ? "80" : std::string(after.substr(1));
  } else {
    const auto colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    u.port = colon == std::string_view::npos ? "80" : std::string(authority.substr(colon + 1));
  }
  if (u.host.empty()) bad("has no host");
  if (u.port.empty() || u.port.size() > 5 || !std::all_of(u.port.begin(), u.port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(u.port) < 1 || std::stoi(u.port) > 65535)
    bad("has no valid port");
  u.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (u.target.front() == '#') u.target = "/";
  else if (u.target.front() == '?') u.target = "/" + u.target;
  if (const auto hash = u.target.find('#'); hash != std::string::npos) u.target.resize(hash);
  for (const char c : u.target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) bad("has a space or control character in its path");
  return u;
}

namespace {

class Keys {
 public:
  Keys(std::string origin) : origin_(std::move(origin)) {}
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw_error(ErrorKind::invalid_argument, origin_ + ": " + path + ": " + what);
  }
  std::int64_t integer(const json::value& v, const std::string& path, std::int64_t min, std::int64_t max) const {
    double x = 0;
    if (v.is_int64()) x = static_cast<double>(v.get_int64());
    else if (v.is_uint64()) x = static_cast<double>(v.get_uint64());
    else if (v.is_double() && std::trunc(v.get_double()) == v.get_double()) x = v.get_double();
    else fail(path, "must be an integer (got " + json::serialize(v) + ")");
    if (x < static_cast<double>(min) || x > static_cast<double>(max))
      fail(path, "must be between " + std::to_string(min) + " and " + std::to_string(max) + " (got " + json::serialize(v) + ")");
    return static_cast<std::int64_t>(x);
  }
  double number(const json::value& v, const std::string& path, double min, double max) const {
    if (!v.is_number()) fail(path, "must be a number (got " + json::serialize(v) + ")");
    const double x = v.to_number<double>();
    if (!(x >= min && x <= max)) fail(path, "must be between " + std::to_string(min) + " and " + std::to_string(max));
    return x;
  }
  std::string string(const json::value& v, const std::string& path) const {
    if (!v.is_string() || v.get_string().empty()) fail(path, "must be a non-empty string (got " + json::serialize(v) + ")");
    return std::string(v.get_string());
  }

 private:
  std::string origin_;
};

WebhookEndpoint parse_endpoint(const Keys& k, const json::value& v, const std::string& path, const fs::path& base_dir) {
  if (!v.is_object()) k.fail(path, "must be an object with url and secret or secret_file");
  WebhookEndpoint e;
  for (const auto& kv : v.get_object()) {
    const std::string key(kv.key()), at = path + "." + key;
    if (key == "url") {
      e.url = k.string(kv.value(), at);
      parse_webhook_url(e.url, at);
    } else if (key == "secret") {
      e.secret = k.string(kv.value(), at);
      try {
        webhook_key(e.secret);
      } catch (const Error& err) {
        k.fail(at, err.what());
      }
    } else if (key == "secret_file") {
      fs::path p = k.string(kv.value(), at);
      e.secret_file = p.is_absolute() ? p : (base_dir / p).lexically_normal();
    } else if (key == "events") {
      if (!kv.value().is_array()) k.fail(at, "must be an array of event types");
      for (const auto& t : kv.value().get_array()) {
        auto type = k.string(t, at);
        if (std::find(std::begin(kWebhookEventTypes), std::end(kWebhookEventTypes), type) == std::end(kWebhookEventTypes))
          k.fail(at, "unknown event type '" + type + "' (known: video.completed, video.failed, video.cancelled)");
        e.events.push_back(std::move(type));
      }
    } else {
      k.fail(at, "unknown key (known: events, secret, secret_file, url)");
    }
  }
  if (e.url.empty()) k.fail(path + ".url", "missing");
  // Neither: $VGEN_WEBHOOK_SECRET (read_environment), checked when the service starts.
  if (!e.secret.empty() && !e.secret_file.empty()) k.fail(path, "give secret or secret_file, not both");
  return e;
}

}  // namespace

WebhookOptions parse_webhook_options(const json::object& o, const std::string& origin, const fs::path& base_dir, WebhookOptions w) {
  const Keys k(origin);
  const std::string p = "webhooks";
  for (const auto& kv : o) {
    const std::string key(kv.key()), at = p + "." + key;
    const auto& v = kv.value();
    if (key == "endpoints") {
      if (!v.is_array()) k.fail(at, "must be an array of endpoints");
      w.endpoints.clear();
      for (std::size_t i = 0; i < v.get_array().size(); ++i)
        w.endpoints.push_back(parse_endpoint(k, v.get_array()[i], at + "[" + std::to_string(i) + "]", base_dir));
    } else if (key == "max_age_s") w.retry.max_age = std::chrono::seconds(k.integer(v, at, 1, 30LL * 86400));
    else if (key == "initial_backoff_ms") w.retry.initial = std::chrono::milliseconds(k.integer(v, at, 1, 86'400'000));
    else if (key == "max_backoff_ms") w.retry.max = std::chrono::milliseconds(k.integer(v, at, 1, 86'400'000));
    else if (key == "multiplier") w.retry.multiplier = k.number(v, at, 1.0, 100.0);
    else if (key == "jitter") w.retry.jitter = k.number(v, at, 0.0, 1.0);
    else if (key == "connect_timeout_ms") w.connect_timeout = std::chrono::milliseconds(k.integer(v, at, 1, 600'000));
    else if (key == "response_timeout_ms") w.response_timeout = std::chrono::milliseconds(k.integer(v, at, 1, 600'000));
    else if (key == "concurrency") w.concurrency = static_cast<std::size_t>(k.integer(v, at, 1, 1024));
    else if (key == "outbox") {
      fs::path f = k.string(v, at);
      w.outbox = f.is_absolute() ? f : (base_dir / f).lexically_normal();
    } else {
      k.fail(at, "unknown key (known: concurrency, connect_timeout_ms, endpoints, initial_backoff_ms, jitter, max_age_s, "
                 "max_backoff_ms, multiplier, outbox, response_timeout_ms)");
    }
  }
  if (w.retry.max < w.retry.initial) k.fail(p + ".max_backoff_ms", "must be >= initial_backoff_ms");
  return w;
}

json::object to_json(const WebhookOptions& w) {
  json::array endpoints;
  for (const auto& e : w.endpoints) {
    json::object o{{"url", e.url}};
    if (!e.secret.empty()) o["secret"] = "(set)";
    if (!e.secret_file.empty()) o["secret_file"] = e.secret_file.string();
    if (!e.events.empty()) {
      json::array types;
      for (const auto& t : e.events) types.emplace_back(t);
      o["events"] = std::move(types);
    }
    endpoints.push_back(std::move(o));
  }
  json::object o{{"endpoints", std::move(endpoints)},
                 {"max_age_s", w.retry.max_age.count()},
                 {"initial_backoff_ms", w.retry.initial.count()},
                 {"max_backoff_ms", w.retry.max.count()},
                 {"multiplier", w.retry.multiplier},
                 {"jitter", w.retry.jitter},
                 {"connect_timeout_ms", w.connect_timeout.count()},
                 {"response_timeout_ms", w.response_timeout.count()},
                 {"concurrency", w.concurrency}};
  if (!w.outbox.empty()) o["outbox"] = w.outbox.string();
  return o;
}

std::string webhook_secret(const WebhookEndpoint& e) {
  std::string secret = e.secret;
  if (secret.empty() && !e.secret_file.empty()) {
    std::ifstream in(e.secret_file);
    if (!in) throw_error(ErrorKind::invalid_argument, "webhook " + e.url + ": secret file " + e.secret_file.string() + " cannot be read");
    std::getline(in, secret);
    while (!secret.empty() && (secret.back() == '\r' || secret.back() == ' ' || secret.back() == '\t')) secret.pop_back();
  }
  if (secret.empty()) throw_error(ErrorKind::invalid_argument, "webhook " + e.url + ": no secret (secret, secret_file or $VGEN_WEBHOOK_SECRET)");
  try {
    webhook_key(secret);
  } catch (const Error& err) {
    throw_error(ErrorKind::invalid_argument, "webhook " + e.url + ": " + err.what());
  }
  return secret;
}

}  // namespace vgen
