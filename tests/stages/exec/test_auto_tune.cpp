#include "stages/exec/auto_tune.hpp"

#include "runtime/errors.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/stages/exec/tune_fakes.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <optional>

#include <fstream>
#include <future>
#include <map>
#include <tuple>
#include <atomic>
#include <condition_variable>
#include <mutex>

using namespace vgen;
using namespace vgen::test;


TEST_CASE("splits: leases x threads fill the cores unless the config fixes one") {
  auto space = two_cores();
  auto s = AutoTuner::splits(space);
  REQUIRE(s.size() == 2);
  CHECK(s[0] == TuneSetting{1, 1, 2});
  CHECK(s[1] == TuneSetting{1, 2, 1});
  space.cores = 16;
  space.intra_op = 4;
  s = AutoTuner::splits(space);
  REQUIRE(s.size() == 3);  // 1, 2 and 4 leases of 4 threads
  CHECK(s[2] == TuneSetting{1, 4, 4});
  space.intra_op.reset();
  space.leases = 3;
  s = AutoTuner::splits(space);
  REQUIRE(s.size() == 1);
  CHECK(s[0] == TuneSetting{1, 3, 5});
  TuneSpace one;
  one.cores = 8;
  one.one_job = true;
  s = AutoTuner::splits(one);
  REQUIRE(s.size() == 3);  // one lease of 8, 4 or 2 threads
  CHECK(s[0] == TuneSetting{1, 1, 8});
  CHECK(s[2] == TuneSetting{1, 1, 2});
}

TEST_CASE("choose: the setting with the fewest seconds per job, from measured timings") {
  // Per-call overhead dominates: batching pays until per-row work takes over, and two
  // single-thread leases beat one two-thread lease (overheads overlap).
  FakeDevice dev{.overhead = 4.0, .per_row = 1.0, .contention = 0.1};
  AutoTuner tuner({.cache_dir = {}, .budget = std::chrono::duration<double>(1e9)});
  const auto space = two_cores();
  const auto c = tuner.choose("pkg|shape", space, dev.measure());
  CHECK(c.source == "probe");
  // Expected by hand: job_s = 10 * step + decode over batch x leases.
  double best = 1e30;
  TuneSetting expect;
  for (const auto& split : AutoTuner::splits(space))
    for (std::size_t b : {1, 2, 4, 8}) {
      auto s = split;
      s.batch = b;
      const auto t = dev(s);
      const double job = (10 * t.step_s + t.decode_s) / static_cast<double>(b * s.leases);
      if (job < best * 0.97) {
        best = job;
        expect = s;
      }
    }
  CHECK(c.setting == expect);
  CHECK(c.setting == TuneSetting{8, 2, 1});
  CHECK(c.probe_s == doctest::Approx(8.0));  // 2 splits x 4 batches, 1 s each
}

TEST_CASE("choose: a batch clearly slower per job ends that split's sweep") {
  // No overhead, a cost that grows faster than the batch (memory traffic) and strong
  // contention: batch 1 on one lease of two threads is best, and each split stops at batch 2.
  FakeDevice dev{.overhead = 0.0, .per_row = 1.0, .quadratic = 1.0, .contention = 2.0, .decode = 0.0};
  AutoTuner tuner({});
  auto space = two_cores();
  space.steps = 1;
  const auto c = tuner.choose("k", space, dev.measure());
  CHECK(c.setting.leases == 1);
  CHECK(c.setting.intra_op == 2);
  CHECK(c.setting.batch == 1);
  CHECK(dev.calls.size() == 4);
}

TEST_CASE("choose: a split twice as slow as another at the same batch is not probed further") {
  // One lease of two threads 3x slower than two single-thread leases (OpenMP on a core another
  // process takes): after batch 1 only the two leases go on (5 calls, not 8).
  struct Slow {
    FakeDevice dev{.overhead = 4.0, .per_row = 1.0, .contention = 0.1};
    TuneSample operator()(const TuneSetting& s) {
      auto out = dev(s);
      if (s.intra_op == 2) out.step_s *= 3, out.decode_s *= 3;
      return out;
    }
  } slow;
  AutoTuner tuner({});
  const auto c = tuner.choose("k", two_cores(), [&slow](const TuneSetting& s) { return slow(s); });
  CHECK(c.setting == TuneSetting{8, 2, 1});
  REQUIRE(slow.dev.calls.size() == 5);
  CHECK(std::count_if(slow.dev.calls.begin(), slow.dev.calls.end(), [](const TuneSetting& s) { return s.intra_op == 2; }) == 1);
}

TEST_CASE("choose: out of memory stops the sweep; all out of memory is an error") {
  FakeDevice dev{.overhead = 4.0, .per_row = 1.0, .oom_above = 2};
  AutoTuner tuner({});
  const auto c = tuner.choose("k", two_cores(), dev.measure());
  CHECK(c.setting.batch == 2);
  for (const auto& s : dev.calls) CHECK(s.batch <= 4);  // never tried 8 after 4 failed
  // A measure that throws Error(out_of_memory) counts the same.
  TuneMeasure throwing = [](const TuneSetting&) -> TuneSample { throw Error(ErrorKind::out_of_memory, "CUDA out of memory"); };
  CHECK_THROWS_AS(tuner.choose("k2", two_cores(), throwing), Error);
  // Any other failure ends the probe with that error.
  TuneMeasure broken = [](const TuneSetting&) -> TuneSample { throw Error(ErrorKind::invalid_argument, "bad package"); };
  try {
    tuner.choose("k3", two_cores(), broken);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
  }
}

TEST_CASE("choose: the budget bounds the probe and keeps every split measured at batch 1") {
  FakeDevice dev{.overhead = 4.0, .spent = 10.0};
  AutoTuner tuner({.cache_dir = {}, .budget = std::chrono::duration<double>(15.0)});
  const auto c = tuner.choose("k", two_cores(), dev.measure());
  REQUIRE(dev.calls.size() == 2);  // 10 s, 20 s: stop (breadth first: both splits at batch 1)
  CHECK(dev.calls[0].batch == 1);
  CHECK(dev.calls[1].batch == 1);
  CHECK(dev.calls[0].leases != dev.calls[1].leases);
  CHECK(c.setting.batch == 1);
}

TEST_CASE("choose: settings within 3 % prefer less concurrency") {
  // Per-row cost only, no contention, no decode: every setting is as fast per job.
  FakeDevice dev{.overhead = 0.0, .per_row = 1.0, .decode = 0.0};
  AutoTuner tuner({});
  const auto c = tuner.choose("k", two_cores(), dev.measure());
  CHECK(c.setting == TuneSetting{1, 1, 2});
}

TEST_CASE("choose: one job (vgen render) probes batch 1 on one lease for the fastest single job") {
  FakeDevice dev{.overhead = 4.0, .per_row = 8.0};
  AutoTuner tuner({});
  TuneSpace space;
  space.cores = 4;
  space.one_job = true;
  space.steps = 5;
  const auto c = tuner.choose("k", space, dev.measure());
  for (const auto& s : dev.calls) {
    CHECK(s.batch == 1);
    CHECK(s.leases == 1);
  }
  CHECK(c.setting == TuneSetting{1, 1, 4});
  CHECK(c.samples.front().job_s == doctest::Approx(5 * (4.0 + 8.0 / 4) + 0.5));
}

TEST_CASE("choose: nothing to tune needs no probe") {
  FakeDevice dev;
  AutoTuner tuner({});
  auto space = two_cores();
  space.batch = 4;
  space.leases = 1;
  const auto c = tuner.choose("k", space, dev.measure());
  CHECK(dev.calls.empty());
  CHECK(c.source == "fixed");
  CHECK(c.setting == TuneSetting{4, 1, 2});
}

TEST_CASE("cache: the next start reads the choice instead of probing; other keys probe") {
  test::TempDir dir;
  FakeDevice dev{.overhead = 4.0};
  const auto space = two_cores();
  TuneChoice first;
  {
    AutoTuner tuner({.cache_dir = dir.path() / "tune"});
    first = tuner.choose("pkg|shape", space, dev.measure());
    CHECK(first.source == "probe");
    CHECK(std::filesystem::is_regular_file(first.file));
  }
  dev.calls.clear();
  AutoTuner next({.cache_dir = dir.path() / "tune"});
  const auto again = next.choose("pkg|shape", space, dev.measure());
  CHECK(dev.calls.empty());
  CHECK(again.source == "cache");
  CHECK(again.setting == first.setting);
  CHECK(again.samples.size() == first.samples.size());
  // Another shape, or the same shape with other cores, is another entry.
  auto other = space;
  other.cores = 4;
  CHECK(next.choose("pkg|shape", other, dev.measure()).source == "probe");
  CHECK(next.choose("pkg|other shape", space, dev.measure()).source == "probe");
}

TEST_CASE("cache: a damaged file is probed again and rewritten") {
  test::TempDir dir;
  FakeDevice dev{.overhead = 4.0};
  AutoTuner tuner({.cache_dir = dir.path()});
  const auto c = tuner.choose("k", two_cores(), dev.measure());
  {
    std::ofstream out(c.file, std::ios::trunc);
    out << "{\"format\": 1, \"key\": \"k\", \"choice\": {\"batch\": 0";
  }
  dev.calls.clear();
  AutoTuner next({.cache_dir = dir.path()});
  const auto again = next.choose("k", two_cores(), dev.measure());
  CHECK(again.source == "probe");
  CHECK_FALSE(dev.calls.empty());
  CHECK(AutoTuner({.cache_dir = dir.path()}).choose("k", two_cores(), dev.measure()).source == "cache");
}

TEST_CASE("cap_batch: out of memory at run time lowers the cached batch for that key") {
  test::TempDir dir;
  FakeDevice dev{.overhead = 4.0};
  AutoTuner tuner({.cache_dir = dir.path()});
  const auto space = two_cores();
  const auto c = tuner.choose("k", space, dev.measure());
  REQUIRE(c.setting.batch == 8);
  CHECK(tuner.cap_batch("other key", 1) == 0);
  CHECK(tuner.cap_batch("k", 4) == 1);
  CHECK(tuner.cap_batch("k", 4) == 0);  // already there
  const auto next = AutoTuner({.cache_dir = dir.path()}).choose("k", space, dev.measure());
  CHECK(next.source == "cache");
  CHECK(next.setting.batch == 4);
  CHECK(next.setting.leases == c.setting.leases);
}

TEST_CASE("default_tune_cache_dir follows VGEN_TUNE_DIR, then XDG_CACHE_HOME, then HOME") {
  auto saved = [](const char* name) { const char* v = std::getenv(name); return v ? std::optional<std::string>(v) : std::nullopt; };
  const auto vgen_dir = saved("VGEN_TUNE_DIR"), xdg = saved("XDG_CACHE_HOME");
  ::setenv("VGEN_TUNE_DIR", "/tmp/tune-here", 1);
  ::setenv("XDG_CACHE_HOME", "/tmp/x-cache", 1);
  CHECK(default_tune_cache_dir() == std::filesystem::path("/tmp/tune-here"));
  ::setenv("VGEN_TUNE_DIR", "relative", 1);  // not absolute: ignored
  CHECK(default_tune_cache_dir() == std::filesystem::path("/tmp/x-cache/vgen/tune"));
  ::unsetenv("VGEN_TUNE_DIR");
  CHECK(default_tune_cache_dir() == std::filesystem::path("/tmp/x-cache/vgen/tune"));
  ::unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME"); home && *home == '/')
    CHECK(default_tune_cache_dir() == std::filesystem::path(home) / ".cache" / "vgen" / "tune");
  if (vgen_dir) ::setenv("VGEN_TUNE_DIR", vgen_dir->c_str(), 1);
  if (xdg) ::setenv("XDG_CACHE_HOME", xdg->c_str(), 1);
}

TEST_CASE("to_string names the setting") { CHECK(to_string(TuneSetting{4, 2, 1}) == "batch 4, 2 leases x 1 thread"); }

TEST_CASE("start: measures only within first_wait, runs at the best so far, and the rest of the search ends where choose() does") {
  test::TempDir dir;
  FakeDevice dev{.overhead = 4.0};  // each measurement "costs" 1 s
  AutoTuner tuner({.cache_dir = dir.path() / "start"});
  const auto space = two_cores();
  auto started = tuner.start("k", space, dev.measure(), std::chrono::duration<double>(2.5));
  // The first measurement (cost unknown), then one whose expected 1 s fits; batch 2 would end past 2.5 s.
  CHECK(dev.calls.size() == 2);
  REQUIRE(started.search);
  CHECK(started.choice.source == "partial");
  CHECK(started.choice.samples.size() == 2);
  CHECK(started.choice.setting.batch == 1);
  CHECK_FALSE(started.search->done());
  // The samples so far are cached, marked incomplete: another tuner does not take them as a choice.
  while (started.search->step()) {
  }
  const auto finished = started.search->finish();
  CHECK(finished.source == "probe");
  FakeDevice fresh{.overhead = 4.0};
  const auto whole = AutoTuner({}).choose("k", space, fresh.measure());
  CHECK(finished.setting == whole.setting);
  CHECK(dev.calls.size() == fresh.calls.size());  // stepping measured what one search measures, no more
  // The next start reuses the finished search from the cache, measuring nothing.
  dev.calls.clear();
  auto next = AutoTuner({.cache_dir = dir.path() / "start"}).start("k", space, dev.measure(), std::chrono::duration<double>(2.5));
  CHECK(dev.calls.empty());
  CHECK(next.choice.source == "cache");
  CHECK(next.choice.setting == whole.setting);
  CHECK_FALSE(next.search);
}

TEST_CASE("start: no wait at all runs at the safe default; a fixed space needs no search") {
  FakeDevice dev{.overhead = 4.0};
  AutoTuner tuner({});
  auto started = tuner.start("k", two_cores(), dev.measure(), std::chrono::duration<double>(0));
  CHECK(dev.calls.empty());
  CHECK(started.choice.source == "default");
  CHECK(started.choice.setting == TuneSetting{1, 2, 1});  // two leases of one core each (robust to a busy core)
  CHECK(started.search);
  auto fixed = two_cores();
  fixed.batch = 2;
  fixed.leases = 2;
  auto f = tuner.start("k", fixed, dev.measure(), std::chrono::duration<double>(0));
  CHECK(f.choice.source == "fixed");
  CHECK(f.choice.setting == TuneSetting{2, 2, 1});
  CHECK_FALSE(f.search);
}

TEST_CASE("start: a search a process left half way is resumed by the next start, its samples replayed, not measured") {
  test::TempDir dir;
  const auto space = two_cores();
  FakeDevice first{.overhead = 4.0};
  {
    AutoTuner tuner({.cache_dir = dir.path()});
    auto s = tuner.start("k", space, first.measure(), std::chrono::duration<double>(2.5));
    REQUIRE(s.search);
    s.search->step();  // one more, then the process "ends"
  }
  CHECK(first.calls.size() == 3);
  FakeDevice second{.overhead = 4.0};
  AutoTuner tuner({.cache_dir = dir.path()});
  auto s = tuner.start("k", space, second.measure(), std::chrono::duration<double>(2.5));
  // The three replayed cost nothing; what is new is measured.
  for (const auto& c : second.calls)
    CHECK(std::find(first.calls.begin(), first.calls.end(), c) == first.calls.end());
  if (s.search)
    while (s.search->step()) {
    }
  const auto done = s.search ? s.search->finish() : s.choice;
  FakeDevice whole{.overhead = 4.0};
  CHECK(done.setting == AutoTuner({}).choose("k", space, whole.measure()).setting);
  CHECK(first.calls.size() + second.calls.size() == whole.calls.size());
  CHECK(done.probe_s == doctest::Approx(static_cast<double>(whole.calls.size())));  // both starts' measuring
}

TEST_CASE("observe: running jobs sweep the split in use at no cost, the best is known without a measurement, the next start reads it") {
  test::TempDir dir;
  const auto space = two_cores();
  // Per job (10 steps, 2 leases): batch 1 30 s, batch 2 25 s, batch 4 30 s (past 10 % worse: the sweep ends).
  FakeDevice jobs{.overhead = 4.0, .quadratic = 1.0};
  FakeDevice dev{.overhead = 4.0, .quadratic = 1.0};  // the probe: must not be called
  AutoTuner tuner({.cache_dir = dir.path()});
  auto started = tuner.start("k", space, dev.measure(), std::chrono::duration<double>(2.5), /*learns_from_jobs=*/true);
  CHECK(dev.calls.empty());  // nothing measured before the first job: its cost was unknown
  CHECK(started.choice.source == "default");
  REQUIRE(started.choice.setting == TuneSetting{1, 2, 1});
  REQUIRE(started.search);
  auto& search = *started.search;
  std::vector<std::size_t> tried;
  while (const auto b = search.next_batch_with_split(2, 1)) {  // what the runtime sets for its next groups
    tried.push_back(*b);
    const auto timing = jobs(TuneSetting{*b, 2, 1});
    CHECK(search.observe(TuneSample{.setting = {*b, 2, 1}, .step_s = timing.step_s}));
    CHECK_FALSE(search.observe(TuneSample{.setting = {*b, 2, 1}, .step_s = 1.0}));  // one sample per setting
  }
  CHECK(tried == std::vector<std::size_t>{1, 2, 4});
  CHECK(dev.calls.empty());
  REQUIRE(search.best_with_split(2, 1));
  CHECK(*search.best_with_split(2, 1) == TuneSetting{2, 2, 1});
  CHECK(search.current().probe_s == 0.0);  // observing costs nothing
  // The next start reads the samples (the search is not over: the other split was never run),
  // starts at the best of them and measures nothing (the other split's cost, estimated from the
  // observed calls, does not fit in the first wait).
  tuner.flush();  // observe() writes on the tuner's writer thread
  FakeDevice again{.overhead = 4.0, .quadratic = 1.0};
  AutoTuner second({.cache_dir = dir.path()});  // outlives its search, which refers to it
  auto next = second.start("k", space, again.measure(), std::chrono::duration<double>(2.5), true);
  CHECK(again.calls.empty());
  CHECK(next.choice.source == "partial");
  CHECK(next.choice.setting == TuneSetting{2, 2, 1});
  REQUIRE(next.search);
  // What is left to measure between jobs skips what the jobs observed.
  while (next.search->step()) {
  }
  for (const auto& c : again.calls) CHECK(c.leases == 1);
  CHECK_FALSE(again.calls.empty());
}

TEST_CASE("observe: an observed sample scores with the measured decode time, as a measurement does") {
  const auto space = two_cores();  // 10 steps
  // Measured: one lease of two threads, a fast denoiser and a slow decoder: (10 x 0.2 + 26) / 1 = 28 s per job.
  const TuneMeasure measure = [](const TuneSetting&) { return TuneSample{.step_s = 0.2, .decode_s = 26.0, .spent_s = 1}; };
  AutoTuner tuner({});
  auto started = tuner.start("k", space, measure, std::chrono::duration<double>(0), true);
  REQUIRE(started.search);
  auto& search = *started.search;
  // The running jobs (two leases of one thread): 4 s per call. Without a decode that scored
  // 10 x 4 / 2 = 20 s per job and won; with the measured decode per job (26 s) it is 33 s.
  REQUIRE(search.observe(TuneSample{.setting = {1, 2, 1}, .step_s = 4.0}));
  CHECK(search.current().setting == TuneSetting{1, 2, 1});  // nothing measured yet: the only sample
  REQUIRE(search.step());  // measures one lease x 2 threads at batch 1
  const auto now = search.current();
  REQUIRE(now.samples.size() == 2);
  CHECK(now.samples[0].observed);
  CHECK(now.samples[0].decode_s == doctest::Approx(26.0));
  CHECK(now.samples[0].job_s == doctest::Approx(33.0));
  CHECK(now.setting == TuneSetting{1, 1, 2});
}

TEST_CASE("observe: the cache is written on the tuner's writer thread, coalesced, and the last state is on disk after it"
          * doctest::timeout(60)) {
  test::TempDir dir;
  const auto space = two_cores();
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  std::vector<std::thread::id> writers;
  const auto caller = std::this_thread::get_id();
  {
    AutoTuner tuner({.cache_dir = dir.path(), .before_write = [&](const std::filesystem::path&) {
                       std::unique_lock lock(m);
                       writers.push_back(std::this_thread::get_id());
                       cv.notify_all();
                       cv.wait(lock, [&] { return release; });  // the first write holds the writer until released
                     }});
    const TuneMeasure measure = [](const TuneSetting&) { return TuneSample{.step_s = 1, .spent_s = 1}; };
    auto started = tuner.start("k", space, measure, std::chrono::duration<double>(0), true);
    REQUIRE(started.search);
    // On the caller, the first observe would block in before_write: this case would time out.
    REQUIRE(started.search->observe(TuneSample{.setting = {1, 2, 1}, .step_s = 4.0}));
    {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return !writers.empty(); });  // the writer holds the first state
    }
    REQUIRE(started.search->observe(TuneSample{.setting = {2, 2, 1}, .step_s = 5.0}));
    REQUIRE(started.search->observe(TuneSample{.setting = {4, 2, 1}, .step_s = 9.0}));
    {
      std::lock_guard lock(m);
      release = true;
    }
    cv.notify_all();
    started.search.reset();
  }  // the tuner's end writes what is left
  CHECK(writers.size() <= 2);  // the two later states coalesced into one write
  for (const auto& id : writers) CHECK(id != caller);
  AutoTuner second({.cache_dir = dir.path()});
  auto next = second.start("k", space, [](const TuneSetting&) { return TuneSample{}; }, std::chrono::duration<double>(0), true);
  CHECK(next.choice.source == "partial");
  CHECK(next.choice.samples.size() == 3);  // the last state
}
