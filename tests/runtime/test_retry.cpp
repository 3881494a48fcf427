#include "runtime/retry.hpp"

#include "tests/support/async_test.hpp"

#include <doctest/doctest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using vgen::ErrorKind;
using vgen::RetryAttempt;
using vgen::RetryOptions;
using vgen::RetryPolicy;
namespace asio = boost::asio;

RetryPolicy exact_policy(int max_attempts) {
  RetryPolicy p;
  p.max_attempts = max_attempts;
  p.base_delay = 100ms;
  p.multiplier = 2.0;
  p.max_delay = 1000ms;
  p.full_jitter = false;
  return p;
}

// A virtual clock (records each requested delay and returns at once), an observer that records
// every attempt, and ops that count their calls.
struct Harness {
  std::vector<milliseconds> delays;
  std::vector<RetryAttempt> attempts;
  int calls = 0;

  RetryOptions options(RetryPolicy policy) {
    RetryOptions o;
    o.policy = policy;
    o.sleeper = [this](milliseconds d) -> asio::awaitable<void> {
      delays.push_back(d);
      co_return;
    };
    o.observer = [this](const RetryAttempt& a) { attempts.push_back(a); };
    return o;
  }

  // Fails `failures` times with `kind` (message "failure <n>"), then returns `value`.
  std::function<asio::awaitable<int>()> fail_then(int failures, ErrorKind kind, int value) {
    return [this, failures, kind, value]() -> asio::awaitable<int> {
      if (++calls <= failures) vgen::throw_error(kind, "failure " + std::to_string(calls));
      co_return value;
    };
  }

  std::function<asio::awaitable<void>()> fail_then_void(int failures, ErrorKind kind) {
    return [this, failures, kind]() -> asio::awaitable<void> {
      if (++calls <= failures) vgen::throw_error(kind, "failure " + std::to_string(calls));
      co_return;
    };
  }

  // Always fails transiently, but suspends first as a real op does. Boost 1.81 trap: a
  // co_spawned coroutine that is cancelled and finishes without ever having suspended makes
  // co_spawn_entry_point's final post() throw outside its try block: std::terminate.
  std::function<asio::awaitable<int>()> suspend_then_fail() {
    return [this]() -> asio::awaitable<int> {
      co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      vgen::throw_error(ErrorKind::transient, "failure " + std::to_string(++calls));
    };
  }
};

// Runs retry<T> to completion through the watchdog; rethrows what retry throws.
template <class T>
T run_retry(RetryOptions options, std::function<asio::awaitable<T>()> op, int threads = 1) {
  std::conditional_t<std::is_void_v<T>, bool, std::optional<T>> out{};
  vgen::test::run_async(
      [&](asio::io_context&) -> asio::awaitable<void> {
        if constexpr (std::is_void_v<T>) {
          co_await vgen::retry<T>(std::move(options), std::move(op));
        } else {
          out.emplace(co_await vgen::retry<T>(std::move(options), std::move(op)));
        }
      },
      vgen::test::default_timeout, threads);
  if constexpr (!std::is_void_v<T>) return std::move(*out);
}

std::vector<milliseconds> jittered_delays(std::uint64_t seed) {
  Harness h;
  RetryOptions options = h.options(exact_policy(6));
  options.policy.full_jitter = true;
  options.seed = seed;
  CHECK_THROWS_AS(run_retry<int>(options, h.fail_then(6, ErrorKind::transient, 0)), vgen::Error);
  CHECK(h.calls == 6);
  return h.delays;
}

}  // namespace

TEST_CASE("backoff without jitter is the exact capped exponential") {
  const RetryPolicy p = exact_policy(3);
  const std::vector<milliseconds> expected{100ms, 200ms, 400ms, 800ms, 1000ms, 1000ms};
  for (int n = 1; n <= 6; ++n) CHECK(p.backoff(n, 0.25) == expected[n - 1]);
  CHECK(p.backoff(5000, 0.0) == 1000ms);  // pow overflows to inf: still the cap
  CHECK_THROWS_AS((void)p.backoff(0, 0.0), vgen::Error);

  RetryPolicy other = p;
  other.multiplier = 1.0;
  CHECK(other.backoff(7, 0.0) == 100ms);
  other.multiplier = 1.5;
  CHECK(other.backoff(3, 0.0) == 225ms);
  CHECK(other.backoff(4, 0.0) == 338ms);  // 337.5 rounds to the nearest millisecond
  other.base_delay = 0ms;
  CHECK(other.backoff(4, 0.0) == 0ms);

  other = RetryPolicy{};  // the defaults: 100 ms, x2, 10 s cap
  other.full_jitter = false;
  CHECK(other.backoff(7, 0.0) == 6400ms);
  CHECK(other.backoff(8, 0.0) == 10'000ms);
}

TEST_CASE("full jitter draws from [0, capped exponential]") {
  RetryPolicy p = exact_policy(3);
  p.full_jitter = true;
  CHECK(p.backoff(1, 0.0) == 0ms);
  CHECK(p.backoff(3, 0.5) == 200ms);
  CHECK(p.backoff(6, 0.5) == 500ms);
  for (int n = 1; n <= 8; ++n) {
    const auto bound = std::min<long long>(1000, 100LL << (n - 1));
    for (double u = 0.0; u < 1.0; u += 0.01) {
      const auto d = p.backoff(n, u).count();
      CHECK(d >= 0);
      CHECK(d <= bound);
    }
    CHECK(p.backoff(n, std::nextafter(1.0, 0.0)).count() == bound);
  }
  CHECK_THROWS_AS((void)p.backoff(1, -0.1), vgen::Error);
  CHECK_THROWS_AS((void)p.backoff(1, std::numeric_limits<double>::quiet_NaN()), vgen::Error);
}

TEST_CASE("jittered retry delays stay in bounds and repeat for the same seed") {
  const auto a = jittered_delays(42);
  const auto b = jittered_delays(42);
  const auto c = jittered_delays(43);
  const auto r = jittered_delays(0);  // seeded from std::random_device
  REQUIRE(a.size() == 5);
  REQUIRE(c.size() == 5);
  REQUIRE(r.size() == 5);
  CHECK(a == b);
  CHECK(a != c);
  const std::vector<long long> bounds{100, 200, 400, 800, 1000};
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    for (const auto& delays : {a, c, r}) {
      CHECK(delays[i].count() >= 0);
      CHECK(delays[i].count() <= bounds[i]);
    }
  }
}

TEST_CASE("two transient failures then success: three attempts, policy delays, observer") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Harness h;
    RetryOptions options = h.options(exact_policy(5));
    options.name = "denoise";
    CHECK(run_retry<int>(options, h.fail_then(2, ErrorKind::transient, 7), threads) == 7);
    CHECK(h.calls == 3);
    CHECK(h.delays == std::vector<milliseconds>{100ms, 200ms});
    REQUIRE(h.attempts.size() == 3);
    for (int i = 0; i < 2; ++i) {
      const RetryAttempt& a = h.attempts[i];
      CHECK(a.attempt == i + 1);
      CHECK_FALSE(a.succeeded);
      CHECK(a.error_kind == ErrorKind::transient);
      CHECK(a.error == "failure " + std::to_string(i + 1));
      CHECK(a.will_retry);
      CHECK(a.next_delay == h.delays[i]);
    }
    const RetryAttempt& last = h.attempts[2];
    CHECK((last.attempt == 3 && last.succeeded && !last.will_retry && last.error.empty()));
    CHECK(last.next_delay == 0ms);
  }
}

struct BadPrompt : vgen::Error {
  BadPrompt() : vgen::Error(ErrorKind::invalid_argument, "prompt is empty") {}
};

TEST_CASE("a permanent error stops after one attempt and is rethrown unchanged") {
  Harness h;
  RetryOptions options = h.options(exact_policy(5));
  std::exception_ptr thrown;
  std::function<asio::awaitable<int>()> op = [&]() -> asio::awaitable<int> {
    ++h.calls;
    thrown = std::make_exception_ptr(BadPrompt{});
    std::rethrow_exception(thrown);
    co_return 0;
  };
  bool caught = false;
  vgen::test::run_async([&](asio::io_context&) -> asio::awaitable<void> {
    try {
      (void)co_await vgen::retry<int>(std::move(options), std::move(op));
    } catch (const BadPrompt& e) {
      caught = true;
      CHECK(std::string(e.what()) == "prompt is empty");
      CHECK(std::current_exception() == thrown);  // the very same exception object
    }
  });
  CHECK(caught);
  CHECK(h.calls == 1);
  CHECK(h.delays.empty());
  REQUIRE(h.attempts.size() == 1);
  CHECK(h.attempts[0].error_kind == ErrorKind::invalid_argument);
  CHECK_FALSE(h.attempts[0].will_retry);
  CHECK(h.attempts[0].next_delay == 0ms);

  Harness std_error;  // std::invalid_argument is classified invalid_argument too
  std::function<asio::awaitable<void>()> bad_frames = [&]() -> asio::awaitable<void> {
    ++std_error.calls;
    throw std::invalid_argument("bad frame count");
    co_return;
  };
  CHECK_THROWS_WITH_AS(run_retry<void>(std_error.options({}), bad_frames), "bad frame count",
                       std::invalid_argument);
  CHECK(std_error.calls == 1);
}

TEST_CASE("attempts exhausted: the last error is rethrown after max_attempts") {
  Harness h;
  CHECK_THROWS_WITH_AS(
      run_retry<int>(h.options(exact_policy(4)), h.fail_then(100, ErrorKind::transient, 0)),
      "failure 4", vgen::Error);
  CHECK(h.calls == 4);
  CHECK(h.delays == std::vector<milliseconds>{100ms, 200ms, 400ms});
  REQUIRE(h.attempts.size() == 4);
  CHECK(h.attempts[2].will_retry);
  CHECK_FALSE(h.attempts[3].will_retry);
  CHECK(h.attempts[3].next_delay == 0ms);

  Harness once;  // max_attempts 1 never retries
  CHECK_THROWS_AS(
      run_retry<int>(once.options(exact_policy(1)), once.fail_then(1, ErrorKind::transient, 0)),
      vgen::Error);
  CHECK(once.calls == 1);
  CHECK(once.delays.empty());
}

TEST_CASE("out_of_memory is retried, as vgen::Error and as std::bad_alloc") {
  Harness h;
  CHECK(run_retry<int>(h.options(exact_policy(3)), h.fail_then(2, ErrorKind::out_of_memory, 5)) ==
        5);
  CHECK(h.calls == 3);

  Harness alloc;
  std::function<asio::awaitable<void>()> op = [&]() -> asio::awaitable<void> {
    if (++alloc.calls == 1) throw std::bad_alloc();
    co_return;
  };
  run_retry<void>(alloc.options(exact_policy(3)), op);
  CHECK(alloc.calls == 2);
  REQUIRE(alloc.attempts.size() == 2);
  CHECK(alloc.attempts[0].error_kind == ErrorKind::out_of_memory);
  CHECK(alloc.attempts[0].will_retry);
}

TEST_CASE("T = void works") {
  for (int threads : {1, 2}) {
    Harness h;
    run_retry<void>(h.options(exact_policy(3)), h.fail_then_void(2, ErrorKind::transient),
                    threads);
    CHECK(h.calls == 3);
    CHECK(h.delays == std::vector<milliseconds>{100ms, 200ms});
  }
}

TEST_CASE("a custom classifier decides what is retryable") {
  Harness h;
  RetryOptions options = h.options(exact_policy(3));
  options.classifier = [](const std::exception_ptr&) { return ErrorKind::transient; };
  std::function<asio::awaitable<std::string>()> op = [&]() -> asio::awaitable<std::string> {
    if (++h.calls < 3) throw std::runtime_error("flaky disk");  // `internal` by default
    co_return std::string("frames");
  };
  CHECK(run_retry<std::string>(options, op) == "frames");
  CHECK(h.calls == 3);
}

TEST_CASE("policy validation names the bad field") {
  CHECK_NOTHROW(RetryPolicy{}.validate());
  const auto rejects = [](auto mutate, const std::string& field) {
    CAPTURE(field);
    RetryPolicy p;
    mutate(p);
    try {
      p.validate();
      FAIL("accepted an invalid policy");
    } catch (const vgen::Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find(field) != std::string::npos);
    }
  };
  rejects([](RetryPolicy& p) { p.max_attempts = 0; }, "max_attempts");
  rejects([](RetryPolicy& p) { p.max_attempts = -2; }, "max_attempts");
  rejects([](RetryPolicy& p) { p.multiplier = 0.5; }, "multiplier");
  rejects([](RetryPolicy& p) { p.multiplier = std::nan(""); }, "multiplier");
  rejects([](RetryPolicy& p) { p.base_delay = -1ms; }, "base_delay");
  rejects([](RetryPolicy& p) { p.max_delay = -5ms; }, "max_delay");

  Harness h;  // retry() validates before the first attempt
  CHECK_THROWS_AS(
      run_retry<int>(h.options(exact_policy(0)), h.fail_then(0, ErrorKind::transient, 1)),
      vgen::Error);
  CHECK(h.calls == 0);
}

TEST_CASE("the default sleeper waits on a real steady_timer") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    Harness h;
    RetryOptions options;  // no sleeper: the real one
    options.policy.base_delay = 1ms;
    options.policy.full_jitter = false;
    const auto start = std::chrono::steady_clock::now();
    CHECK(run_retry<int>(options, h.fail_then(2, ErrorKind::transient, 3), threads) == 3);
    CHECK(h.calls == 3);
    CHECK(std::chrono::steady_clock::now() - start >= 3ms);  // 1 ms + 2 ms
  }
}

namespace {

// co_spawns a retry onto a strand, bound to a cancellation signal, and awaits it; returns the
// error code it ended with (success is a test failure).
using Strand = asio::strand<asio::io_context::executor_type>;
asio::awaitable<boost::system::error_code> spawn_cancellable(
    Strand strand, asio::cancellation_signal& signal, RetryOptions options,
    std::function<asio::awaitable<int>()> op) {
  auto task = vgen::retry<int>(std::move(options), std::move(op));
  auto token = asio::bind_cancellation_slot(signal.slot(), asio::use_awaitable);
  try {
    (void)co_await asio::co_spawn(strand, std::move(task), token);
    FAIL("retry succeeded");
  } catch (const boost::system::system_error& e) {
    co_return e.code();
  }
  co_return boost::system::error_code{};
}

}  // namespace

TEST_CASE("cancellation during a real backoff sleep ends the retry at once") {
  for (int threads : {1, 2}) {
    for (bool deferred : {true, false}) {
      CAPTURE(threads);
      CAPTURE(deferred);
      Harness h;
      boost::system::error_code ec;
      const auto start = std::chrono::steady_clock::now();
      vgen::test::run_async(
          [&](asio::io_context& io) -> asio::awaitable<void> {
            asio::cancellation_signal signal;
            auto strand = asio::make_strand(io);
            RetryOptions options;  // real sleeper, a backoff of most of the watchdog's 30 s
            options.policy.max_attempts = 5;
            options.policy.base_delay = 25s;
            options.policy.full_jitter = false;
            options.observer = [&](const RetryAttempt& a) {
              if (a.attempt != 1) return;
              // Deferred: runs once retry has suspended in its timer wait (the observer runs on
              // the retry's strand). Otherwise the cancellation lands before the sleep begins.
              auto emit = [&signal] { signal.emit(asio::cancellation_type::terminal); };
              if (deferred) {
                asio::post(strand, emit);
              } else {
                emit();
              }
            };
            auto op = h.suspend_then_fail();
            ec = co_await spawn_cancellable(strand, signal, std::move(options), std::move(op));
          },
          std::chrono::seconds{30}, threads);
      CHECK(ec == asio::error::operation_aborted);
      CHECK(h.calls == 1);
      // Not a speed bound: anything short of the backoff shows that the sleep was cut short,
      // and a loaded machine must not fail it.
      CHECK(std::chrono::steady_clock::now() - start < 25s);
    }
  }
}

TEST_CASE("a virtual sleeper that ignores cancellation still stops the loop") {
  Harness h;
  boost::system::error_code ec;
  vgen::test::run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    asio::cancellation_signal signal;
    RetryOptions options = h.options(exact_policy(5));
    options.sleeper = [&signal](milliseconds) -> asio::awaitable<void> {
      signal.emit(asio::cancellation_type::terminal);  // "cancelled while sleeping"
      co_return;
    };
    auto op = h.suspend_then_fail();
    auto strand = asio::make_strand(io);
    ec = co_await spawn_cancellable(strand, signal, std::move(options), std::move(op));
  });
  CHECK(ec == asio::error::operation_aborted);
  CHECK(h.calls == 1);
  CHECK(h.attempts.size() == 1);
}
