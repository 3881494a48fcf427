#include "api/webhook_retry.hpp"

#include <algorithm>
#include <cmath>

namespace vgen {

std::string_view to_string(WebhookState s) noexcept {
  switch (s) {
    case WebhookState::pending: return "pending";
    case WebhookState::delivered: return "delivered";
    case WebhookState::expired: return "expired";
  }
  return "pending";
}

std::chrono::milliseconds webhook_backoff(const WebhookRetryPolicy& p, int failures, double draw) {
  const double base = static_cast<double>(p.initial.count()) * std::pow(p.multiplier, std::max(0, failures - 1));
  const double capped = std::min(base, static_cast<double>(p.max.count()));
  const double factor = 1.0 + p.jitter * (2.0 * std::clamp(draw, 0.0, 1.0) - 1.0);
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(capped * factor)));
}

bool webhook_too_old(const WebhookRetryPolicy& p, const WebhookAttempts& a, double now_unix) {
  return now_unix > a.created_unix + static_cast<double>(p.max_age.count());
}

WebhookAttempts after_webhook_attempt(const WebhookRetryPolicy& p, WebhookAttempts a, bool acknowledged, double now_unix, double draw) {
  if (a.state != WebhookState::pending) return a;
  ++a.attempts;
  if (acknowledged) {
    a.state = WebhookState::delivered;
    return a;
  }
  const double deadline = a.created_unix + static_cast<double>(p.max_age.count());
  if (now_unix >= deadline) {
    a.state = WebhookState::expired;
    return a;
  }
  const double delay = static_cast<double>(webhook_backoff(p, a.attempts, draw).count()) / 1000.0;
  a.next_unix = std::min(now_unix + delay, deadline);
  return a;
}

}  // namespace vgen
