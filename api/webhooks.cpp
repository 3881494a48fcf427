#include "api/webhooks.hpp"

#include "api/webhook_signature.hpp"
#include "runtime/errors.hpp"
#include "runtime/metrics.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace vgen {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string webhook_body(const WebhookEvent& e) {
  boost::json::object o;  // keys in OpenAI's order (boost::json keeps insertion order)
  o["id"] = e.id;
  o["object"] = "event";
  o["type"] = e.type;
  o["created_at"] = e.created_at;
  o["data"] = boost::json::object{{"id", e.subject_id}};
  return boost::json::serialize(o);
}

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

struct AttemptOutcome {
  bool acknowledged = false;
  std::string error;  // why not (empty when acknowledged)
};

// The URL's query and fragment may hold a token: the metrics label is scheme, host, port and path.
std::string label_of(const std::string& url) { return url.substr(0, url.find_first_of("?#")); }

}  // namespace

class Webhooks::Impl {
 public:
  struct Endpoint {
    WebhookEndpoint config;
    WebhookUrl url;
    std::string key;  // the HMAC key
    std::size_t in_flight = 0;
    Counter* delivered;
    Counter* failed;
    Counter* expired;
    Gauge* pending;
    Gauge* in_flight_gauge;
  };
  struct Item {
    WebhookDelivery delivery;
    bool in_flight = false;
  };

  Impl(WebhookOptions options, const std::filesystem::path& outbox, MetricsRegistry& metrics, AttemptObserver on_attempt)
      : options_(std::move(options)), on_attempt_(std::move(on_attempt)), outbox_(outbox), timer_(ctx_), rng_(std::random_device{}()) {
    for (const auto& e : options_.endpoints) {
      const Labels labels{{"endpoint", label_of(e.url)}};
      Endpoint ep{.config = e, .url = parse_webhook_url(e.url, "webhook"), .key = webhook_key(webhook_secret(e))};
      ep.delivered = &metrics.counter("vgen_webhook_deliveries_total", "Webhook deliveries by result (delivered: a 2xx; failed_attempt: "
                                      "an attempt without one, retried; expired: given up at max_age)",
                                      {{"endpoint", label_of(e.url)}, {"result", "delivered"}});
      ep.failed = &metrics.counter("vgen_webhook_deliveries_total", "", {{"endpoint", label_of(e.url)}, {"result", "failed_attempt"}});
      ep.expired = &metrics.counter("vgen_webhook_deliveries_total", "", {{"endpoint", label_of(e.url)}, {"result", "expired"}});
      ep.pending = &metrics.gauge("vgen_webhook_pending", "Webhook deliveries recorded and not yet acknowledged or expired", labels);
      ep.in_flight_gauge = &metrics.gauge("vgen_webhook_in_flight", "Webhook requests in flight", labels);
      if (!endpoints_.emplace(e.url, std::move(ep)).second)
        throw_error(ErrorKind::invalid_argument, "webhooks: endpoint " + e.url + " is configured twice");
    }
    std::size_t unconfigured = 0;
    const double now = unix_now();
    // Settled rows are kept for twice the max age (a job that ends again after a crash does so
    // well within it, and its event must stay known so as not to be sent twice), then dropped.
    outbox_.prune(now - 2.0 * static_cast<double>(options_.retry.max_age.count()));
    for (auto& d : outbox_.pending()) {
      // A new process tries what an earlier one left at once (in memory only: the backoff
      // resumes from the attempts recorded); most were never tried, as after a crash.
      d.attempts.next_unix = std::min(d.attempts.next_unix, now);
      if (!endpoints_.contains(d.endpoint)) {
        ++unconfigured;  // an endpoint removed from the config: never called, its rows kept
        continue;
      }
      endpoints_.at(d.endpoint).pending->inc();
      pending_.push_back(Item{std::move(d)});
    }
    pending_count_ = pending_.size();
    if (!pending_.empty()) spdlog::info("webhooks: {} delivery(ies) pending from before, resending", pending_.size());
    if (unconfigured) spdlog::warn("webhooks: {} pending delivery(ies) to endpoints no longer configured are left in {}", unconfigured,
                                   outbox.string());
    asio::co_spawn(ctx_, dispatch(), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        spdlog::error("webhooks: the dispatcher stopped: {}", ex.what());
      }
    });
    thread_ = std::thread([this] { ctx_.run(); });
  }

  ~Impl() {
    work_.reset();
    ctx_.stop();  // requests in flight are abandoned: their rows stay pending in the outbox
    thread_.join();
  }

  std::size_t record(const WebhookEvent& event) {
    std::vector<std::string> urls;
    for (const auto& [url, ep] : endpoints_)
      if (ep.config.wants(event.type)) urls.push_back(url);
    if (urls.empty()) return 0;
    auto added = outbox_.add(event.id, event.type, webhook_body(event), static_cast<double>(event.created_at), urls);
    const auto n = added.size();
    std::lock_guard lock(mutex_);
    for (auto& d : added) recorded_.push_back(std::move(d));
    return n;
  }

  void watch(const std::string& subject_id) { outbox_.watch(subject_id, unix_now()); }
  void unwatch(const std::string& subject_id) { outbox_.unwatch(subject_id); }

  // The event is added before the watch goes: a crash in between leaves the watch, and adding
  // the same event again after the restart adds nothing.
  std::size_t record_watched(const WebhookEvent& event) {
    if (!outbox_.watched(event.subject_id)) return 0;
    const auto n = record(event);
    outbox_.unwatch(event.subject_id);
    return n;
  }

  void wake() {
    asio::post(ctx_, [this] {
      std::vector<WebhookDelivery> added;
      {
        std::lock_guard lock(mutex_);
        added.swap(recorded_);
      }
      for (auto& d : added) {
        endpoints_.at(d.endpoint).pending->inc();
        pending_.push_back(Item{std::move(d)});
      }
      pending_count_ = pending_.size();
      poke();
    });
  }

  WebhookStats stats() const {
    return {delivered_.load(), failed_.load(), expired_.load(), pending_count_.load(), in_flight_.load()};
  }

  const std::filesystem::path& outbox() const { return outbox_.file(); }

 private:
  // On the thread: the dispatcher looks again (something was added, or a request ended).
  void poke() {
    dirty_ = true;
    timer_.cancel();
  }

  // Starts every due delivery its endpoint has room for, then sleeps until the next one is due
  // or something changes.
  asio::awaitable<void> dispatch() {
    for (;;) {
      dirty_ = false;
      const double now = unix_now();
      double next_due = now + 3600;
      std::vector<std::list<Item>::iterator> due;
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (it->in_flight) continue;
        if (it->delivery.attempts.next_unix > now) {
          next_due = std::min(next_due, it->delivery.attempts.next_unix);
          continue;
        }
        auto& ep = endpoints_.at(it->delivery.endpoint);
        if (ep.in_flight >= options_.concurrency) continue;  // a request that ends pokes
        it->in_flight = true;
        ++ep.in_flight;
        due.push_back(it);
      }
      // Started after the walk: a delivery may end (and erase its item) before co_spawn returns.
      for (auto it : due) start(it, endpoints_.at(it->delivery.endpoint));
      if (dirty_) continue;
      timer_.expires_after(std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil((next_due - now) * 1000.0))));
      co_await timer_.async_wait(tuple_awaitable);
    }
  }

  void start(std::list<Item>::iterator it, Endpoint& ep) {  // it->in_flight and ep.in_flight counted already
    ++in_flight_;
    ep.in_flight_gauge->inc();
    asio::co_spawn(ctx_, deliver(it, ep), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        spdlog::error("webhooks: a delivery stopped: {}", ex.what());
      }
    });
  }

  asio::awaitable<void> deliver(std::list<Item>::iterator it, Endpoint& ep) {
    auto& d = it->delivery;
    AttemptOutcome outcome;
    if (webhook_too_old(options_.retry, d.attempts, unix_now())) {
      d.attempts.state = WebhookState::expired;  // after a long outage: past its age, not sent
    } else {
      outcome = co_await attempt(d, ep);
      const double draw = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
      d.attempts = after_webhook_attempt(options_.retry, d.attempts, outcome.acknowledged, unix_now(), draw);
      d.last_error = outcome.error;
    }
    try {
      outbox_.update(d);
    } catch (const std::exception& e) {
      // Not written: it stays pending in the file, so at worst it is sent again by the next process.
      spdlog::error("webhooks: outbox {}: {}", outbox_.file().string(), e.what());
    }
    if (d.attempts.state == WebhookState::delivered) {
      ep.delivered->inc();
      ++delivered_;
    } else if (d.attempts.state == WebhookState::expired) {
      ep.expired->inc();
      ++expired_;
      spdlog::warn("webhooks: gave up on {} to {} after {} attempt(s): {}", d.event_id, d.endpoint, d.attempts.attempts, d.last_error);
    }
    if (!outcome.acknowledged && d.attempts.state != WebhookState::expired) {
      ep.failed->inc();
      ++failed_;
      spdlog::info("webhooks: {} to {}: attempt {} failed ({}), next in {:.1f} s", d.event_id, d.endpoint, d.attempts.attempts,
                   outcome.error, d.attempts.next_unix - unix_now());
    }
    if (on_attempt_) on_attempt_(d);  // after the counters (stats() agrees), while it still holds its room
    --ep.in_flight;
    --in_flight_;
    ep.in_flight_gauge->dec();
    it->in_flight = false;
    if (d.attempts.state != WebhookState::pending) {
      ep.pending->dec();
      pending_.erase(it);
      pending_count_ = pending_.size();
    }
    poke();
  }

  // One signed POST; never throws (a failure is the outcome's error).
  asio::awaitable<AttemptOutcome> attempt(const WebhookDelivery& d, const Endpoint& ep) {
    const auto timestamp = static_cast<std::int64_t>(std::floor(unix_now()));
    http::request<http::string_body> req{http::verb::post, ep.url.target, 11};
    const bool v6 = ep.url.host.find(':') != std::string::npos;
    req.set(http::field::host, (v6 ? "[" + ep.url.host + "]" : ep.url.host) + (ep.url.port == "80" ? "" : ":" + ep.url.port));
    req.set(http::field::user_agent, "vgen-webhooks");
    req.set(http::field::content_type, "application/json");
    req.set(http::field::connection, "close");
    req.set("webhook-id", d.event_id);
    req.set("webhook-timestamp", std::to_string(timestamp));
    req.set("webhook-signature", sign_webhook(ep.key, d.event_id, timestamp, d.body));
    req.body() = d.body;
    req.prepare_payload();

    tcp::resolver resolver(ctx_);
    // getaddrinfo has no timeout of its own here: the system resolver's bounds it (a numeric
    // host, the common case for a local receiver, resolves at once).
    auto [rec, endpoints] = co_await resolver.async_resolve(ep.url.host, ep.url.port, tuple_awaitable);
    if (rec) co_return AttemptOutcome{false, "resolve: " + rec.message()};
    beast::tcp_stream stream(ctx_);
    stream.expires_after(options_.connect_timeout);
    auto [cec, peer] = co_await stream.async_connect(endpoints, tuple_awaitable);
    if (cec) co_return AttemptOutcome{false, cec == beast::error::timeout ? "connect: timed out" : "connect: " + cec.message()};
    stream.expires_after(options_.response_timeout);
    auto [wec, written] = co_await http::async_write(stream, req, tuple_awaitable);
    if (wec) co_return AttemptOutcome{false, wec == beast::error::timeout ? "response: timed out" : "send: " + wec.message()};
    beast::flat_buffer buffer;
    http::response_parser<http::empty_body> parser;
    parser.header_limit(16 * 1024);
    auto [hec, read] = co_await http::async_read_header(stream, buffer, parser, tuple_awaitable);
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    if (hec) co_return AttemptOutcome{false, hec == beast::error::timeout ? "response: timed out" : "response: " + hec.message()};
    const unsigned status = parser.get().result_int();
    if (status >= 200 && status < 300) co_return AttemptOutcome{true, ""};
    co_return AttemptOutcome{false, "HTTP " + std::to_string(status) + (status >= 300 && status < 400 ? " (redirects are not followed)" : "")};
  }

  WebhookOptions options_;
  AttemptObserver on_attempt_;
  WebhookOutbox outbox_;
  asio::io_context ctx_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(ctx_);
  asio::steady_timer timer_;
  bool dirty_ = false;                      // on the thread
  std::map<std::string, Endpoint> endpoints_;  // by URL; fixed after construction
  std::list<Item> pending_;                 // on the thread; stable iterators for the deliveries
  std::mt19937_64 rng_;                     // on the thread
  std::mutex mutex_;
  std::vector<WebhookDelivery> recorded_;  // by record(), taken by wake(); under mutex_
  std::atomic<std::uint64_t> delivered_{0}, failed_{0}, expired_{0};
  std::atomic<std::size_t> pending_count_{0}, in_flight_{0};
  std::thread thread_;  // last: starts once everything above exists
};

Webhooks::Webhooks(WebhookOptions options, const std::filesystem::path& outbox, MetricsRegistry& metrics, AttemptObserver on_attempt)
    : impl_(std::make_unique<Impl>(std::move(options), outbox, metrics, std::move(on_attempt))) {}
Webhooks::~Webhooks() = default;
std::size_t Webhooks::record(const WebhookEvent& event) { return impl_->record(event); }
void Webhooks::watch(const std::string& subject_id) { impl_->watch(subject_id); }
void Webhooks::unwatch(const std::string& subject_id) { impl_->unwatch(subject_id); }
std::size_t Webhooks::record_watched(const WebhookEvent& event) { return impl_->record_watched(event); }

WebhookEvent job_end_event(const std::string& job_id, JobState state) {
  WebhookEvent e;
  e.id = "evt_" + job_id;
  e.type = state == JobState::done ? "video.completed" : state == JobState::cancelled ? "video.cancelled" : "video.failed";
  e.subject_id = job_id;
  e.created_at = static_cast<std::int64_t>(unix_now());
  return e;
}
void Webhooks::wake() { impl_->wake(); }
WebhookStats Webhooks::stats() const { return impl_->stats(); }
const std::filesystem::path& Webhooks::outbox() const { return impl_->outbox(); }

}  // namespace vgen
