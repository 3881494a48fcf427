// The retry rule of one webhook delivery (one event to one endpoint), as a pure state machine:
//   pending --2xx--> delivered
//   pending --failure--> pending, next attempt after an exponential backoff with jitter
//   pending --failure or due, at or past created + max_age--> expired (never sent again)
// The attempt after the n-th failure waits initial * multiplier^(n-1), at most max, scaled by
// a uniform factor in [1 - jitter, 1 + jitter] (so that many deliveries failed at once by one
// outage do not retry in lock step), and never past the deadline: the last attempt is at
// created + max_age. The caller supplies the clock and the random draw, so tests are exact.
// Thread-safety: pure functions over values.
#pragma once

#include <chrono>
#include <string_view>

namespace vgen {

struct WebhookRetryPolicy {
  std::chrono::milliseconds initial{1000};
  std::chrono::milliseconds max{std::chrono::minutes(10)};
  double multiplier = 2.0;
  double jitter = 0.2;  // 0..1
  std::chrono::seconds max_age{std::chrono::hours(24)};
};

enum class WebhookState { pending, delivered, expired };
std::string_view to_string(WebhookState s) noexcept;

struct WebhookAttempts {
  WebhookState state = WebhookState::pending;
  int attempts = 0;         // made so far
  double created_unix = 0;  // when the event was recorded (its age counts from here)
  double next_unix = 0;     // when the next attempt is due (pending only)
};

// The delay after the `failures`-th failure (1 for the first), `draw` uniform in [0, 1).
std::chrono::milliseconds webhook_backoff(const WebhookRetryPolicy& policy, int failures, double draw);

// Whether a pending delivery is past its age at `now_unix` (expire it instead of sending).
bool webhook_too_old(const WebhookRetryPolicy& policy, const WebhookAttempts& a, double now_unix);

// The state after an attempt that ended at `now_unix`, acknowledged (a 2xx) or not.
WebhookAttempts after_webhook_attempt(const WebhookRetryPolicy& policy, WebhookAttempts a, bool acknowledged, double now_unix,
                                      double draw);

}  // namespace vgen
