// Webhooks end to end against a loopback receiver run by the test (POSIX sockets, one thread):
// a 503 is retried and the retry carries the same id and body under a valid signature; a new
// Webhooks over the outbox resends what an earlier one left pending, with the same id; a
// receiver that never answers costs a timeout, not a stall; rows for endpoints no longer
// configured are never sent. Every wait is on an event (the attempt observer, the receiver's
// requests), bounded only by a generous guard.
#include "api/webhooks.hpp"
#include "api/webhook_signature.hpp"
#include "runtime/metrics.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

using namespace vgen;
using namespace std::chrono_literals;

namespace {

constexpr const char* kSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

struct Request {
  std::map<std::string, std::string> headers;  // lower-case names
  std::string target, body;
};

// Answers each request with the next status of `script` (its last one repeats); 0: never answer
// (the connection is held open until the receiver ends).
class Receiver {
 public:
  explicit Receiver(std::vector<int> script) : script_(std::move(script)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~Receiver() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
    thread_.join();
    ::close(fd_);
    for (int c : held_) ::close(c);
  }
  std::string url(const std::string& path = "/hook") const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  void set_script(std::vector<int> script) {
    std::lock_guard lock(mutex_);
    script_ = std::move(script);
    next_ = 0;
  }
  std::vector<Request> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void serve() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string data;
      char buf[4096];
      std::size_t header_end = std::string::npos, need = 0;
      while (header_end == std::string::npos || data.size() < header_end + 4 + need) {
        const auto n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        data.append(buf, static_cast<std::size_t>(n));
        if (header_end == std::string::npos && (header_end = data.find("\r\n\r\n")) != std::string::npos) {
          const auto cl = data.find("Content-Length: ");
          if (cl != std::string::npos) need = std::stoul(data.substr(cl + 16));
        }
      }
      Request r;
      r.body = data.substr(std::min(data.size(), header_end + 4));
      std::size_t line_end = data.find("\r\n");
      const auto first = data.substr(0, line_end);
      r.target = first.substr(first.find(' ') + 1, first.rfind(' ') - first.find(' ') - 1);
      for (std::size_t at = line_end + 2; at < header_end; at = line_end + 2) {
        line_end = data.find("\r\n", at);
        const auto line = data.substr(at, line_end - at);
        auto name = line.substr(0, line.find(':'));
        for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        r.headers[name] = line.substr(line.find(':') + 2);
      }
      int status = 0;
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(r);
        status = script_[std::min(next_++, script_.size() - 1)];
      }
      if (status == 0) {
        held_.push_back(c);
        continue;
      }
      const auto reply = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<int> script_;
  std::size_t next_ = 0;
  std::vector<Request> requests_;
  std::vector<int> held_;  // on the thread, then the destructor
  std::thread thread_;
};

// The attempts the Webhooks observer reported, waited on.
class Attempts {
 public:
  // `also` runs first, on the sender's thread, while the delivery still counts as in flight.
  Webhooks::AttemptObserver observer(std::function<void()> also = {}) {
    return [this, also](const WebhookDelivery& d) {
      if (also) also();
      std::lock_guard lock(mutex_);
      seen_.push_back(d);
      cv_.notify_all();
    };
  }
  std::vector<WebhookDelivery> wait_for(std::size_t n) {
    std::unique_lock lock(mutex_);
    REQUIRE(cv_.wait_for(lock, 120s, [&] { return seen_.size() >= n; }));  // a guard, not a timing
    return seen_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<WebhookDelivery> seen_;
};

WebhookOptions options_for(const std::vector<std::string>& urls) {
  WebhookOptions o;
  for (const auto& u : urls) o.endpoints.push_back({.url = u, .secret = kSecret});
  o.retry.initial = 10ms;
  o.retry.max = 50ms;
  o.retry.jitter = 0;
  return o;
}

WebhookEvent event(const std::string& job) {
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return WebhookEvent{.id = "evt_" + job, .type = "video.completed", .subject_id = job, .created_at = now};
}

void check_signed(const Request& r) {
  const auto ts = std::stoll(r.headers.at("webhook-timestamp"));
  CHECK(r.headers.at("webhook-signature") == sign_webhook(webhook_key(kSecret), r.headers.at("webhook-id"), ts, r.body));
  CHECK(r.headers.at("content-type") == "application/json");
}

}  // namespace

TEST_CASE("a 503 is retried with the same id and body, each attempt signed" * doctest::timeout(120)) {
  test::TempDir dir;
  Receiver receiver({503, 200});
  Attempts attempts;
  MetricsRegistry metrics;
  {
    Webhooks hooks(options_for({receiver.url()}), dir / "outbox.db", metrics, attempts.observer());
    CHECK(hooks.record(event("job-1")) == 1);
    CHECK(hooks.record(event("job-1")) == 0);  // the same event again: nothing new
    hooks.wake();
    const auto seen = attempts.wait_for(2);
    CHECK(seen[0].attempts.state == WebhookState::pending);
    CHECK(seen[0].last_error == "HTTP 503");
    CHECK(seen[1].attempts.state == WebhookState::delivered);
    CHECK(seen[1].attempts.attempts == 2);
    CHECK(hooks.stats().delivered == 1);
    CHECK(hooks.stats().failed_attempts == 1);
  }
  const auto requests = receiver.requests();
  REQUIRE(requests.size() == 2);
  for (const auto& r : requests) {
    check_signed(r);
    CHECK(r.target == "/hook");
    CHECK(r.headers.at("webhook-id") == "evt_job-1");
    CHECK(r.body == requests[0].body);
  }
  CHECK(requests[0].body.find(R"("type":"video.completed")") != std::string::npos);
  CHECK(requests[0].body.find(R"("data":{"id":"job-1"})") != std::string::npos);
  WebhookOutbox box(dir / "outbox.db");
  CHECK(box.count(WebhookState::delivered) == 1);
  CHECK(box.count(WebhookState::pending) == 0);
  CHECK(metrics.render_prometheus().find("vgen_webhook_deliveries_total{endpoint=\"" + receiver.url() + "\",result=\"delivered\"} 1") !=
        std::string::npos);
}

TEST_CASE("a new Webhooks over the outbox resends what was left pending, under the same id" * doctest::timeout(120)) {
  test::TempDir dir;
  Receiver receiver({503});
  auto options = options_for({receiver.url()});
  options.retry.initial = options.retry.max = std::chrono::hours(1);  // no second attempt in this process
  MetricsRegistry metrics;
  {
    Attempts attempts;
    Webhooks hooks(options, dir / "outbox.db", metrics, attempts.observer());
    hooks.record(event("job-2"));
    hooks.wake();
    CHECK(attempts.wait_for(1)[0].attempts.state == WebhookState::pending);
  }  // as if the process ended here
  receiver.set_script({200});
  Attempts attempts;
  Webhooks again(options, dir / "outbox.db", metrics, attempts.observer());  // no record(): it comes from the outbox
  const auto seen = attempts.wait_for(1);
  CHECK(seen[0].attempts.state == WebhookState::delivered);
  CHECK(seen[0].attempts.attempts == 2);
  const auto requests = receiver.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[1].headers.at("webhook-id") == requests[0].headers.at("webhook-id"));
  CHECK(requests[1].body == requests[0].body);
  check_signed(requests[1]);
}

TEST_CASE("a receiver that never answers costs a timeout; concurrency per endpoint is bounded" * doctest::timeout(120)) {
  test::TempDir dir;
  Receiver receiver({0});
  auto options = options_for({receiver.url()});
  options.response_timeout = 200ms;
  options.concurrency = 1;
  options.retry.initial = options.retry.max = std::chrono::hours(1);
  Attempts attempts;
  MetricsRegistry metrics;
  std::vector<std::size_t> received;  // what the receiver had when each attempt ended (sender's thread)
  Webhooks hooks(options, dir / "outbox.db", metrics, attempts.observer([&] { received.push_back(receiver.requests().size()); }));
  hooks.record(event("job-3"));
  hooks.record(event("job-4"));
  hooks.wake();
  const auto seen = attempts.wait_for(2);
  CHECK(seen[0].last_error == "response: timed out");
  CHECK(seen[1].last_error == "response: timed out");
  CHECK(seen[0].event_id != seen[1].event_id);
  CHECK(hooks.stats().pending == 2);
  // One at a time: when the first attempt ended the second had not been sent (with room for
  // two both go out at once, and the receiver holds what it accepts).
  CHECK(received.at(0) <= 1);
  CHECK(receiver.requests().size() == 2);
}

TEST_CASE("pending rows of an endpoint no longer configured are never sent" * doctest::timeout(120)) {
  test::TempDir dir;
  Receiver receiver({200});
  {
    WebhookOutbox box(dir / "outbox.db");
    box.add("evt_old", "video.failed", "{}", 1e9, {receiver.url("/removed")});
  }
  Attempts attempts;
  MetricsRegistry metrics;
  {
    Webhooks hooks(options_for({receiver.url()}), dir / "outbox.db", metrics, attempts.observer());
    hooks.record(event("job-5"));
    hooks.wake();
    CHECK(attempts.wait_for(1)[0].event_id == "evt_job-5");
  }
  for (const auto& r : receiver.requests()) CHECK(r.target == "/hook");
  WebhookOutbox box(dir / "outbox.db");
  const auto left = box.pending();
  REQUIRE(left.size() == 1);
  CHECK(left[0].event_id == "evt_old");
  CHECK(left[0].attempts.attempts == 0);
}

TEST_CASE("a watched subject's end is recorded once, across reopening; an unwatched one's never" * doctest::timeout(120)) {
  test::TempDir dir;
  Receiver receiver({200});
  auto options = options_for({receiver.url()});
  MetricsRegistry metrics;
  {
    Webhooks hooks(options, dir / "outbox.db", metrics);
    hooks.watch("job-w");
    hooks.watch("job-w");  // twice: still one watch
    hooks.watch("job-gone");
    hooks.unwatch("job-gone");  // a refused submission
  }  // as a front end that dies before the job ends
  Attempts attempts;
  Webhooks hooks(options, dir / "outbox.db", metrics, attempts.observer());
  CHECK(hooks.record_watched(event("job-other")) == 0);  // another front end's job
  CHECK(hooks.record_watched(event("job-gone")) == 0);
  CHECK(hooks.record_watched(job_end_event("job-w", JobState::failed)) == 1);
  CHECK(hooks.record_watched(job_end_event("job-w", JobState::failed)) == 0);  // the record seen again (a replay)
  hooks.wake();
  CHECK(attempts.wait_for(1)[0].attempts.state == WebhookState::delivered);
  const auto requests = receiver.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].headers.at("webhook-id") == "evt_job-w");
  CHECK(requests[0].body.find(R"("type":"video.failed")") != std::string::npos);
  CHECK(WebhookOutbox(dir / "outbox.db").watches() == 0);
}

TEST_CASE("job_end_event: one id per job, the type from its end") {
  CHECK(job_end_event("j1", JobState::done).id == "evt_j1");
  CHECK(job_end_event("j1", JobState::done).type == "video.completed");
  CHECK(job_end_event("j1", JobState::cancelled).type == "video.cancelled");
  CHECK(job_end_event("j1", JobState::failed).type == "video.failed");
  CHECK(job_end_event("j1", JobState::done).subject_id == "j1");
  CHECK(job_end_event("j1", JobState::done).created_at > 1'700'000'000);
}
