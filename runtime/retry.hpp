// Retrying an asynchronous operation with capped exponential backoff and full jitter.
//
// `retry<T>(options, op)` runs `co_await op()` until it succeeds, fails with an error that is not
// retryable (classified by `options.classifier`, default `vgen::classify`; `is_retryable` decides),
// or `policy.max_attempts` attempts have been made. The last exception is then rethrown unchanged
// (same type, same message). Between attempts it awaits `options.sleeper(policy.backoff(n, u))`,
// `u` drawn from a std::mt19937_64 seeded with `options.seed` (0: std::random_device).
//
// Ownership: the returned awaitable owns `options` and `op`; `op` is called once per attempt and
// must return a fresh awaitable each time. Nothing is shared between calls, so concurrent
// retries need no locking; the observer and sleeper run on the awaiting coroutine's executor
// (from whatever thread drives it) and must be thread-safe if shared between retries.
//
// Blocking: never blocks a thread; the default sleeper is an asio::steady_timer on the current
// executor. Each failed attempt is logged (spdlog warn) and every attempt, successful or not, is
// reported to `options.observer` before any backoff sleep. An observer or classifier that
// throws ends the retry with that exception.
//
// Cancellation: if the awaiting coroutine is cancelled (per its cancellation filter: terminal
// only, by default, for co_spawn) during a backoff sleep, the sleep ends and
// boost::system::system_error(operation_aborted) propagates at once; no further attempt is made.
// The cancellation state is also checked after every sleep, so a sleeper that ignores
// cancellation (a virtual clock) still stops the loop. Cancelling the op itself is the op's
// business: an op that fails with operation_aborted is classified `cancelled` and is not retried.
// Boost 1.81 trap (co_spawn, not retry): if a co_spawned coroutine is cancelled and completes
// without ever having suspended (op, observer and sleeper all synchronous), co_spawn's entry
// point throws operation_aborted outside its try block and the process terminates. Real ops
// suspend; synchronous test doubles that emit cancellation must suspend once first.
#pragma once

#include "runtime/errors.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace vgen {

namespace asio = boost::asio;

struct RetryPolicy {
  int max_attempts = 3;                           // total attempts incl. the first; >= 1
  std::chrono::milliseconds base_delay{100};      // >= 0
  double multiplier = 2.0;                        // >= 1, finite
  std::chrono::milliseconds max_delay{10'000};    // cap, >= 0
  bool full_jitter = true;  // delay ~ U[0, min(cap, base*mult^(n-1))]; false: exactly that bound

  // Throws vgen::Error(invalid_argument) naming the first bad field.
  void validate() const;

  // The delay before retry number n (n = 1 is the wait after the first failed attempt), rounded
  // to whole milliseconds. `u` in [0,1) is the random draw; ignored without jitter. Throws
  // vgen::Error(invalid_argument) for n < 1 or (with jitter) u outside [0,1].
  std::chrono::milliseconds backoff(int n, double u) const;
};

// Reported for every attempt, success or failure.
struct RetryAttempt {
  int attempt = 0;  // 1-based
  bool succeeded = false;
  ErrorKind error_kind = ErrorKind::internal;  // meaningful when !succeeded
  std::string error;                           // message when !succeeded
  bool will_retry = false;
  std::chrono::milliseconds next_delay{0};  // 0 unless will_retry
};

using RetryObserver = std::function<void(const RetryAttempt&)>;
// Empty: a real asio::steady_timer on the current executor.
using Sleeper = std::function<asio::awaitable<void>(std::chrono::milliseconds)>;
// Empty: vgen::classify.
using Classifier = std::function<ErrorKind(const std::exception_ptr&)>;

struct RetryOptions {
  RetryPolicy policy;
  RetryObserver observer;  // optional
  Sleeper sleeper;         // optional: tests pass a virtual clock that records delays
  Classifier classifier;   // optional
  std::uint64_t seed = 0;  // jitter RNG seed; 0 => seeded from std::random_device
  std::string name;        // operation name for logs (a stage and a job, ...)
};

namespace detail {

// Waits `delay` on a steady_timer bound to the awaiting coroutine's executor.
asio::awaitable<void> sleep_on_current_executor(std::chrono::milliseconds delay);

// `seed`, or a std::random_device draw when it is 0.
std::uint64_t resolve_seed(std::uint64_t seed);

// spdlog warn line for a failed attempt.
void log_failed_attempt(const std::string& name, int max_attempts, const RetryAttempt& a);

// Throws system_error(operation_aborted) if the awaiting coroutine has been cancelled.
asio::awaitable<void> throw_if_cancelled();

// Calls the observer if there is one.
void notify(const RetryObserver& observer, const RetryAttempt& a);

}  // namespace detail

template <class T>
asio::awaitable<T> retry(RetryOptions options, std::function<asio::awaitable<T>()> op) {
  options.policy.validate();
  if (!op) throw_error(ErrorKind::invalid_argument, "retry: operation must not be empty");
  const RetryPolicy& policy = options.policy;
  Sleeper sleep = options.sleeper ? std::move(options.sleeper)
                                  : Sleeper(&detail::sleep_on_current_executor);
  Classifier classifier =
      options.classifier ? std::move(options.classifier) : Classifier(&vgen::classify);
  std::mt19937_64 rng(detail::resolve_seed(options.seed));
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  for (int attempt = 1;; ++attempt) {
    // The observer and classifier run outside the try block so that their own exceptions are
    // never mistaken for a failure of the operation.
    std::exception_ptr error;
    [[maybe_unused]] std::conditional_t<std::is_void_v<T>, std::monostate, std::optional<T>>
        result;
    try {
      if constexpr (std::is_void_v<T>) {
        co_await op();
      } else {
        result.emplace(co_await op());
      }
    } catch (...) {
      error = std::current_exception();
    }

    if (!error) {
      detail::notify(options.observer, RetryAttempt{attempt, true, ErrorKind::internal, {},
                                                    false, std::chrono::milliseconds{0}});
      if constexpr (std::is_void_v<T>) {
        co_return;
      } else {
        co_return std::move(*result);
      }
    }

    RetryAttempt report;
    report.attempt = attempt;
    report.error_kind = classifier(error);
    report.error = describe(error);
    report.will_retry = is_retryable(report.error_kind) && attempt < policy.max_attempts;
    if (report.will_retry) report.next_delay = policy.backoff(attempt, unit(rng));
    detail::log_failed_attempt(options.name, policy.max_attempts, report);
    detail::notify(options.observer, report);
    if (!report.will_retry) std::rethrow_exception(error);

    co_await detail::throw_if_cancelled();
    co_await sleep(report.next_delay);
    co_await detail::throw_if_cancelled();
  }
}

}  // namespace vgen
