#include "runtime/retry.hpp"

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

namespace vgen {

namespace {

[[noreturn]] void bad_field(const char* field, const std::string& requirement,
                            const std::string& got) {
  throw_error(ErrorKind::invalid_argument,
              std::string("RetryPolicy.") + field + " must be " + requirement + " (got " + got +
                  ")");
}

}  // namespace

void RetryPolicy::validate() const {
  if (max_attempts < 1) bad_field("max_attempts", ">= 1", std::to_string(max_attempts));
  if (base_delay.count() < 0)
    bad_field("base_delay", ">= 0 ms", std::to_string(base_delay.count()) + " ms");
  // Written so that NaN fails too.
  if (!(multiplier >= 1.0) || !std::isfinite(multiplier))
    bad_field("multiplier", "finite and >= 1", std::to_string(multiplier));
  if (max_delay.count() < 0)
    bad_field("max_delay", ">= 0 ms", std::to_string(max_delay.count()) + " ms");
}

std::chrono::milliseconds RetryPolicy::backoff(int n, double u) const {
  if (n < 1) throw_error(ErrorKind::invalid_argument, "RetryPolicy::backoff: n must be >= 1");
  if (full_jitter && !(u >= 0.0 && u <= 1.0))
    throw_error(ErrorKind::invalid_argument, "RetryPolicy::backoff: u must be in [0, 1]");
  // Computed in double so that a large n saturates at the cap (pow may give inf) instead of
  // overflowing an integer.
  const double cap = static_cast<double>(max_delay.count());
  const double bound =
      std::min(cap, static_cast<double>(base_delay.count()) * std::pow(multiplier, n - 1));
  const double ms = full_jitter ? u * bound : bound;
  return std::chrono::milliseconds{std::llround(std::clamp(ms, 0.0, cap))};
}

namespace detail {

asio::awaitable<void> sleep_on_current_executor(std::chrono::milliseconds delay) {
  asio::steady_timer timer(co_await asio::this_coro::executor, delay);
  co_await timer.async_wait(asio::use_awaitable);
}

std::uint64_t resolve_seed(std::uint64_t seed) {
  if (seed != 0) return seed;
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

void log_failed_attempt(const std::string& name, int max_attempts, const RetryAttempt& a) {
  const std::string_view op = name.empty() ? std::string_view("operation") : name;
  if (a.will_retry) {
    spdlog::warn("retry: {} attempt {}/{} failed ({}: {}); retrying in {} ms", op, a.attempt,
                 max_attempts, to_string(a.error_kind), a.error, a.next_delay.count());
  } else if (!is_retryable(a.error_kind)) {
    spdlog::warn("retry: {} attempt {}/{} failed ({}: {}); not retryable", op, a.attempt,
                 max_attempts, to_string(a.error_kind), a.error);
  } else {
    spdlog::warn("retry: {} attempt {}/{} failed ({}: {}); giving up", op, a.attempt,
                 max_attempts, to_string(a.error_kind), a.error);
  }
}

asio::awaitable<void> throw_if_cancelled() {
  asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
  if (state.cancelled() != asio::cancellation_type::none)
    throw boost::system::system_error(asio::error::operation_aborted, "retry: cancelled");
}

void notify(const RetryObserver& observer, const RetryAttempt& a) {
  if (observer) observer(a);
}

}  // namespace detail

}  // namespace vgen
