// WebhookOptions: where job-end events are sent (api/webhooks.hpp) and how hard to try.
// Config key "webhooks" (api/config.hpp):
//   {"endpoints": [{"url": "http://host:port/path", "secret_file": "hook.secret",   // or "secret": "whsec_..."
//                   "events": ["video.completed", "video.failed", "video.cancelled"]}],   // default: all
//    "max_age_s": 86400, "initial_backoff_ms": 1000, "max_backoff_ms": 600000, "multiplier": 2, "jitter": 0.2,
//    "connect_timeout_ms": 5000, "response_timeout_ms": 10000, "concurrency": 4, "outbox": "file.db"}
// Only these endpoints are ever called (no job names a URL). http:// only: an https:// URL is
// refused by name (no TLS client yet). `vgen serve --webhook URL` adds one endpoint, its
// secret from --webhook-secret-file or $VGEN_WEBHOOK_SECRET (never a flag in clear).
// Thread-safety: plain values; the functions are pure apart from reading a secret file.
#pragma once

#include "api/webhook_retry.hpp"

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

// The event types a job's end produces (OpenAI's names for the same moments).
inline constexpr std::string_view kWebhookEventTypes[] = {"video.completed", "video.failed", "video.cancelled"};

struct WebhookEndpoint {
  std::string url;
  std::string secret;                 // "whsec_<base64>"; or read from secret_file
  std::filesystem::path secret_file;  // one line, "whsec_<base64>"
  std::vector<std::string> events;    // empty: every type
  bool wants(std::string_view type) const;
};

struct WebhookUrl {
  std::string host, port, target;  // target: path and query ("/" when the URL has none)
};
// Error(invalid_argument) naming `what` unless `url` is http://HOST[:PORT][/PATH] (https by name).
WebhookUrl parse_webhook_url(const std::string& url, const std::string& what);

struct WebhookOptions {
  std::vector<WebhookEndpoint> endpoints;  // none: no webhooks, no outbox
  WebhookRetryPolicy retry;
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds response_timeout{10000};  // from the request's first byte to the whole response
  std::size_t concurrency = 4;                        // requests in flight per endpoint
  std::filesystem::path outbox;  // SQLite file of the deliveries; empty: the journal's file, else <output_dir>/.vgen-webhooks.db
};

// Applies the "webhooks" object over `base`; Error(invalid_argument) "<origin>: webhooks.<key>: ..."
// Relative paths resolve against base_dir.
WebhookOptions parse_webhook_options(const boost::json::object& json, const std::string& origin,
                                     const std::filesystem::path& base_dir, WebhookOptions base = {});
boost::json::object to_json(const WebhookOptions& options);  // secrets shown as "(set)"

// The endpoint's secret: `secret`, else the first line of secret_file. Error(invalid_argument)
// naming the endpoint when there is none or it is not a whsec_ secret.
std::string webhook_secret(const WebhookEndpoint& endpoint);

}  // namespace vgen
