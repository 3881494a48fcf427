#include "api/result_lookup.hpp"

#include "tests/support/async_test.hpp"
#include "tests/support/python_reference.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <mutex>

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace vgen;
using namespace vgen::detail;
using vgen::test::run_async;
using vgen::test::sleep_for;

namespace {

// Jobs whose spec's "k" is their content key and whose output is <dir>/<id>.mp4.
struct Bench {
  fs::path dir = test::temp_dir("vgen-result-lookup-");
  ResultCache cache{8, std::chrono::minutes(5)};
  WorkerPool copies{WorkerPool::Options{.name = "codec", .threads = 1, .spin = std::chrono::microseconds(0)}};
  std::mutex m;
  std::map<std::string, std::shared_ptr<JobEntry>> entries;
  ResultLookup lookup{cache, copies, context()};

  ResultLookup::Context context() {
    ResultLookup::Context c;
    c.entry = [this](const std::string& id) {
      std::lock_guard l(m);
      auto it = entries.find(id);
      return it == entries.end() ? nullptr : it->second;
    };
    c.key = [](const Job& job) { return content_key("test", job.spec()); };
    c.output = [this](const Job& job) { return dir / (job.id() + ".mp4"); };
    return c;
  }
  std::shared_ptr<Job> job(const std::string& id, const std::string& key) {
    auto e = std::make_shared<JobEntry>();
    e->id = id;
    std::lock_guard l(m);
    entries[id] = e;
    return std::make_shared<Job>(id, boost::json::object{{"k", key}});
  }
  JobEntry& entry(const std::string& id) {
    std::lock_guard l(m);
    return *entries.at(id);
  }
  // The leader's end as the Runtime publishes it: the cache told, then its waiters woken.
  void end(const std::string& id, JobState state) {
    auto& e = entry(id);
    JobResult r;
    r.state = state;
    r.output = dir / (id + ".mp4");
    if (state == JobState::done) std::ofstream(r.output) << "video of " << id;
    lookup.finish(e, r);
    e.ended.set();
  }
  ~Bench() {
    copies.stop();
    fs::remove_all(dir);
  }
};

}  // namespace

TEST_CASE("the hook: a leader renders, a follower waits for it and is served a copy; a hit ends the job" * doctest::timeout(60)) {
  Bench b;
  run_async([&](asio::io_context&) -> asio::awaitable<void> {
    auto leader = b.job("a", "same");
    const auto o1 = co_await b.lookup.serve(*leader);

    CHECK(o1 == HookOutcome::go_on);
    CHECK(b.entry("a").leader);
    auto follower = b.job("b", "same");
    std::optional<HookOutcome> followed;
    auto wait = [&]() -> asio::awaitable<void> { followed = co_await b.lookup.serve(*follower); };
    asio::co_spawn(co_await asio::this_coro::executor, wait(), asio::detached);
    co_await sleep_for(std::chrono::milliseconds(5));
    CHECK_FALSE(followed);  // waiting for the leader
    b.end("a", JobState::done);
    while (!followed) co_await sleep_for(std::chrono::microseconds(200));
    CHECK(*followed == HookOutcome::done);
    CHECK(b.entry("b").cache_hit);
    CHECK(b.entry("b").cached_output == b.dir / "b.mp4");
    CHECK(fs::file_size(b.dir / "b.mp4") == fs::file_size(b.dir / "a.mp4"));
    auto later = b.job("c", "same");
    const auto o2 = co_await b.lookup.serve(*later);

    CHECK(o2 == HookOutcome::done);  // from the cache, no wait
    CHECK(b.lookup.hits() == 2);
    auto other = b.job("d", "different");
    const auto o3 = co_await b.lookup.serve(*other);

    CHECK(o3 == HookOutcome::go_on);
  });
}

TEST_CASE("the hook: when the leader fails, its follower leads and renders" * doctest::timeout(60)) {
  Bench b;
  run_async([&](asio::io_context&) -> asio::awaitable<void> {
    auto leader = b.job("a", "k");
    const auto o4 = co_await b.lookup.serve(*leader);

    CHECK(o4 == HookOutcome::go_on);
    auto follower = b.job("b", "k");
    std::optional<HookOutcome> followed;
    auto wait = [&]() -> asio::awaitable<void> { followed = co_await b.lookup.serve(*follower); };
    asio::co_spawn(co_await asio::this_coro::executor, wait(), asio::detached);
    co_await sleep_for(std::chrono::milliseconds(5));
    b.end("a", JobState::failed);
    while (!followed) co_await sleep_for(std::chrono::microseconds(200));
    CHECK(*followed == HookOutcome::go_on);
    CHECK(b.entry("b").leader);
    CHECK_FALSE(b.entry("b").cache_hit);
    CHECK(b.lookup.hits() == 0);
  });
}

TEST_CASE("the hook lets a job it does not know go on, and names itself lookup") {
  Bench b;
  auto stranger = std::make_shared<Job>("x", boost::json::object{{"k", "k"}});
  std::optional<HookOutcome> out;
  run_async([&](asio::io_context&) -> asio::awaitable<void> { out = co_await b.lookup.serve(*stranger); });
  CHECK(out == HookOutcome::go_on);
  const auto hook = b.lookup.hook(4, 16);
  CHECK(hook.name == "lookup");
  CHECK(hook.workers == 4);
  CHECK(hook.queue_capacity == 16);
}
