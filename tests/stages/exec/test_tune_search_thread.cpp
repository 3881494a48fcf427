#include "stages/exec/tune_search_thread.hpp"

#include "tests/stages/exec/tune_fakes.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>

using namespace vgen;
using namespace vgen::test;

TEST_CASE("TuneSearchThread: jobs run while a measurement blocks; it measures only on a free device and reports the end" *
          doctest::timeout(60)) {
  test::TempDir dir;
  const auto space = two_cores();
  std::mutex m;
  std::condition_variable cv;
  bool measuring = false, release = false;
  std::atomic<int> calls{0};
  FakeDevice dev{.overhead = 4.0};
  // Blocks in its first call until the test releases it.
  const TuneMeasure blocking = [&](const TuneSetting& s) {
    if (++calls == 1) {
      std::unique_lock lock(m);
      measuring = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    }
    return dev(s);
  };
  AutoTuner tuner({.cache_dir = dir.path()});
  auto started = tuner.start("k", space, blocking, std::chrono::duration<double>(0));
  REQUIRE(started.search);
  CHECK(calls == 0);  // the first job starts now, at the default: nothing was measured
  std::atomic<bool> busy{true};  // a "job" holds the device
  std::atomic<int> held{0};
  std::optional<TuneChoice> ended;
  std::mutex end_mutex;
  {
    TuneSearchThread thread(std::move(started.search),
                            {.hold_device = [&]() -> std::shared_ptr<void> {
                               if (busy) return nullptr;
                               ++held;
                               return std::make_shared<int>(0);
                             },
                             .on_done = [&](const TuneChoice& c) {
                               std::lock_guard lock(end_mutex);
                               ended = c;
                               cv.notify_all();
                             },
                             .on_error = {},
                             .idle_grace = std::chrono::duration<double>(0)});
    thread.poke();
    // While the job runs nothing is measured, however often it is poked.
    thread.poke();
    CHECK(calls == 0);
    busy = false;  // the job ended
    thread.poke();
    {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return measuring; });
    }
    CHECK(calls == 1);
    CHECK_FALSE(thread.finished());  // the search is not over while a job could run
    {
      std::lock_guard lock(m);
      release = true;
    }
    cv.notify_all();
    {
      std::unique_lock lock(end_mutex);
      cv.wait(lock, [&] { return ended.has_value(); });
    }
    CHECK(thread.finished());
  }
  CHECK(ended->source == "probe");
  CHECK(held == calls);  // every measurement held the device
  FakeDevice whole{.overhead = 4.0};
  CHECK(ended->setting == AutoTuner({}).choose("k", space, whole.measure()).setting);
  // The cached result is what the next start uses.
  auto next = AutoTuner({.cache_dir = dir.path()}).start("k", space, blocking, std::chrono::duration<double>(0));
  CHECK(next.choice.source == "cache");
  CHECK(next.choice.setting == ended->setting);
}

TEST_CASE("TuneSearchThread: stopped before the device is free, it measures nothing and reports no end" * doctest::timeout(120)) {
  FakeDevice dev{.overhead = 4.0};
  AutoTuner tuner({});
  auto started = tuner.start("k", two_cores(), dev.measure(), std::chrono::duration<double>(0));
  bool done = false;
  {
    TuneSearchThread thread(std::move(started.search), {.hold_device = [] { return std::shared_ptr<void>(); },
                                                        .on_done = [&](const TuneChoice&) { done = true; },
                                                        .on_error = {},
                                                        .idle_grace = std::chrono::duration<double>(0)});
    thread.poke();
  }
  CHECK(dev.calls.empty());
  CHECK_FALSE(done);
}

TEST_CASE("TuneSearchThread: a step estimated above max_step is skipped, never measured, so no job waits behind it" *
          doctest::timeout(60)) {
  const auto space = two_cores();
  std::atomic<int> measured{0}, held{0};
  const TuneMeasure measure = [&](const TuneSetting&) {
    ++measured;
    return TuneSample{.step_s = 1, .spent_s = 1};
  };
  AutoTuner tuner({});
  auto started = tuner.start("k", space, measure, std::chrono::duration<double>(2), true);
  REQUIRE(started.search);
  // A running job's calls: 6 s each, so a measurement would take about 24 s (4 calls).
  REQUIRE(started.search->observe(TuneSample{.setting = {1, 2, 1}, .step_s = 6.0}));
  std::promise<TuneChoice> ended;
  {
    TuneSearchThread thread(std::move(started.search),
                            {.hold_device = [&]() -> std::shared_ptr<void> {
                               ++held;
                               return std::make_shared<int>(0);
                             },
                             .on_done = [&](const TuneChoice& c) { ended.set_value(c); },
                             .on_error = {},
                             .idle_grace = std::chrono::duration<double>(0),
                             .max_step = std::chrono::duration<double>(2)});
    thread.poke();
    const auto done = ended.get_future().get();  // every costly setting skipped: the search ends
    CHECK(done.setting == TuneSetting{1, 2, 1});  // what the job showed
    CHECK(done.samples.size() == 1);
  }
  CHECK(measured == 0);
  CHECK(held == 0);  // the device was never taken from jobs
}
