// The retry rule of a webhook delivery as a state machine, on a given clock and random draw:
// a 2xx delivers; failures back off exponentially with jitter up to a cap; the last attempt is
// at created + max_age and a failure then expires it; a settled delivery does not change.
#include "api/webhook_retry.hpp"

#include <doctest/doctest.h>

using namespace vgen;
using std::chrono::milliseconds;

namespace {
WebhookRetryPolicy policy() {
  WebhookRetryPolicy p;
  p.initial = milliseconds(1000);
  p.max = milliseconds(8000);
  p.multiplier = 2;
  p.jitter = 0.25;
  p.max_age = std::chrono::seconds(60);
  return p;
}
}  // namespace

TEST_CASE("backoff doubles up to the cap; jitter scales it within [1 - j, 1 + j]") {
  const auto p = policy();
  CHECK(webhook_backoff(p, 1, 0.5) == milliseconds(1000));
  CHECK(webhook_backoff(p, 2, 0.5) == milliseconds(2000));
  CHECK(webhook_backoff(p, 3, 0.5) == milliseconds(4000));
  CHECK(webhook_backoff(p, 4, 0.5) == milliseconds(8000));
  CHECK(webhook_backoff(p, 30, 0.5) == milliseconds(8000));  // capped (no overflow far out)
  CHECK(webhook_backoff(p, 1, 0.0) == milliseconds(750));
  CHECK(webhook_backoff(p, 1, 1.0) == milliseconds(1250));
  CHECK(webhook_backoff(p, 4, 0.0) == milliseconds(6000));
  auto no_jitter = p;
  no_jitter.jitter = 0;
  CHECK(webhook_backoff(no_jitter, 2, 0.9) == milliseconds(2000));
}

TEST_CASE("a delivery: failures then a 2xx") {
  const auto p = policy();
  WebhookAttempts a{.created_unix = 1000, .next_unix = 1000};
  a = after_webhook_attempt(p, a, false, 1000, 0.5);
  CHECK(a.state == WebhookState::pending);
  CHECK(a.attempts == 1);
  CHECK(a.next_unix == doctest::Approx(1001));
  a = after_webhook_attempt(p, a, false, 1001, 0.5);
  CHECK(a.next_unix == doctest::Approx(1003));
  CHECK_FALSE(webhook_too_old(p, a, 1003));
  a = after_webhook_attempt(p, a, true, 1003, 0.5);
  CHECK(a.state == WebhookState::delivered);
  CHECK(a.attempts == 3);
  // Settled: nothing changes it any more.
  const auto again = after_webhook_attempt(p, a, false, 1004, 0.5);
  CHECK(again.state == WebhookState::delivered);
  CHECK(again.attempts == 3);
}

TEST_CASE("the last attempt is at the deadline; a failure there expires the delivery") {
  const auto p = policy();
  WebhookAttempts a{.attempts = 5, .created_unix = 1000, .next_unix = 1055};
  a = after_webhook_attempt(p, a, false, 1055, 0.5);  // 8 s backoff would pass created + 60
  CHECK(a.state == WebhookState::pending);
  CHECK(a.next_unix == doctest::Approx(1060));
  a = after_webhook_attempt(p, a, false, 1060, 0.5);
  CHECK(a.state == WebhookState::expired);
  CHECK(a.attempts == 7);
  CHECK(webhook_too_old(p, WebhookAttempts{.created_unix = 1000}, 1060.5));
  CHECK_FALSE(webhook_too_old(p, WebhookAttempts{.created_unix = 1000}, 1060));
}

TEST_CASE("a 2xx at the deadline still delivers") {
  const auto p = policy();
  const auto a = after_webhook_attempt(p, WebhookAttempts{.created_unix = 1000}, true, 1060, 0.5);
  CHECK(a.state == WebhookState::delivered);
}
