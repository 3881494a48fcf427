// Webhook options: the "webhooks" config object read strictly (unknown keys, unknown event
// types, https and other schemes refused by name), URLs split into host, port and target,
// secrets from the config or a file, and $VGEN_WEBHOOK_SECRET through read_environment.
#include "api/webhook_options.hpp"
#include "api/config.hpp"
#include "runtime/errors.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <cstdlib>
#include <fstream>

using namespace vgen;
namespace json = boost::json;

namespace {
WebhookOptions parse(const std::string& text, const std::filesystem::path& base = "/base") {
  return parse_webhook_options(json::parse(text).as_object(), "config x", base);
}
constexpr const char* kSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
}  // namespace

TEST_CASE("URLs: http only, host, port, target") {
  auto u = parse_webhook_url("http://127.0.0.1:9000/hooks/vgen?x=1", "w");
  CHECK(u.host == "127.0.0.1");
  CHECK(u.port == "9000");
  CHECK(u.target == "/hooks/vgen?x=1");
  u = parse_webhook_url("http://example.com", "w");
  CHECK(u.port == "80");
  CHECK(u.target == "/");
  u = parse_webhook_url("http://[::1]:81/a#frag", "w");
  CHECK(u.host == "::1");
  CHECK(u.port == "81");
  CHECK(u.target == "/a");
  CHECK_THROWS_WITH_AS(parse_webhook_url("https://example.com/", "w"), doctest::Contains("https:// endpoints are not supported"), Error);
  CHECK_THROWS_WITH_AS(parse_webhook_url("ftp://example.com/", "w"), doctest::Contains("must be an http:// URL"), Error);
  CHECK_THROWS_AS(parse_webhook_url("http://:80/", "w"), Error);
  CHECK_THROWS_AS(parse_webhook_url("http://h:0/", "w"), Error);
  CHECK_THROWS_AS(parse_webhook_url("http://h:99999/", "w"), Error);
  CHECK_THROWS_AS(parse_webhook_url("http://user:pw@h/", "w"), Error);
  CHECK_THROWS_AS(parse_webhook_url("http://h/a b", "w"), Error);
}

TEST_CASE("the webhooks object, strictly") {
  const auto w = parse(std::string(R"({"endpoints": [{"url": "http://127.0.0.1:9/h", "secret": ")") + kSecret +
                       R"(", "events": ["video.failed"]}, {"url": "http://127.0.0.1:9/g", "secret_file": "s.txt"}],
                       "max_age_s": 120, "initial_backoff_ms": 10, "max_backoff_ms": 100, "jitter": 0, "concurrency": 2,
                       "connect_timeout_ms": 50, "response_timeout_ms": 60, "outbox": "o.db"})");
  REQUIRE(w.endpoints.size() == 2);
  CHECK(w.endpoints[0].wants("video.failed"));
  CHECK_FALSE(w.endpoints[0].wants("video.completed"));
  CHECK(w.endpoints[1].wants("video.completed"));  // no list: every type
  CHECK(w.endpoints[1].secret_file == std::filesystem::path("/base/s.txt"));
  CHECK(w.retry.max_age == std::chrono::seconds(120));
  CHECK(w.retry.initial == std::chrono::milliseconds(10));
  CHECK(w.concurrency == 2);
  CHECK(w.response_timeout == std::chrono::milliseconds(60));
  CHECK(w.outbox == std::filesystem::path("/base/o.db"));
  CHECK(to_json(w).at("endpoints").as_array()[0].at("secret") == "(set)");  // never the secret itself

  CHECK_THROWS_WITH_AS(parse(R"({"nope": 1})"), doctest::Contains("webhooks.nope: unknown key"), Error);
  CHECK_THROWS_WITH_AS(parse(R"({"endpoints": [{"url": "http://h/", "secret_file": "s", "events": ["video.done"]}]})"),
                       doctest::Contains("unknown event type 'video.done'"), Error);
  CHECK_THROWS_WITH_AS(parse(R"({"endpoints": [{"url": "https://h/", "secret_file": "s"}]})"),
                       doctest::Contains("webhooks.endpoints[0].url: https://"), Error);
  CHECK_THROWS_WITH_AS(parse(R"({"endpoints": [{"url": "http://h/", "secret": "whsec_!!"}]})"),
                       doctest::Contains("webhooks.endpoints[0].secret"), Error);
  CHECK_THROWS_WITH_AS(parse(R"({"endpoints": [{"secret_file": "s"}]})"), doctest::Contains("url: missing"), Error);
  CHECK_THROWS_WITH_AS(parse(R"({"initial_backoff_ms": 10, "max_backoff_ms": 5})"), doctest::Contains("max_backoff_ms"), Error);
}

TEST_CASE("secrets: inline, from a file, from the environment") {
  test::TempDir dir;
  {
    std::ofstream(dir / "s.txt") << kSecret << "\n";
  }
  WebhookEndpoint e{.url = "http://h/", .secret_file = dir / "s.txt"};
  CHECK(webhook_secret(e) == kSecret);
  e.secret_file = dir / "missing.txt";
  CHECK_THROWS_WITH_AS(webhook_secret(e), doctest::Contains("cannot be read"), Error);
  CHECK_THROWS_WITH_AS(webhook_secret(WebhookEndpoint{.url = "http://h/"}), doctest::Contains("no secret"), Error);

  // A config endpoint with neither takes $VGEN_WEBHOOK_SECRET (the app reads the environment).
  auto c = parse_config(R"({"webhooks": {"endpoints": [{"url": "http://127.0.0.1:9/"}]}})", "config y", "/");
  ::setenv("VGEN_WEBHOOK_SECRET", kSecret, 1);
  read_environment(c);
  ::unsetenv("VGEN_WEBHOOK_SECRET");
  CHECK(webhook_secret(c.webhooks.endpoints.at(0)) == kSecret);
}
