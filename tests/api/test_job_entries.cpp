#include "api/job_entries.hpp"

#include <doctest/doctest.h>

#include <thread>

using namespace vgen;
using namespace vgen::detail;

namespace {
JobResult result(JobState state) {
  JobResult r;
  r.state = state;
  return r;
}
}  // namespace

TEST_CASE("an id is registered once; fill runs before the entry is visible, and a throwing fill leaves nothing") {
  JobEntries entries(std::chrono::hours(1));
  auto a = entries.add("a", [](JobEntry& e) { e.output = "a.mp4"; });
  CHECK(a->id == "a");
  CHECK(entries.find("a") == a);
  CHECK(entries.find("a")->output == "a.mp4");
  CHECK_THROWS_AS(entries.add("a", [](JobEntry&) {}), Error);
  CHECK_THROWS_AS(entries.add("b", [](JobEntry&) { throw Error(ErrorKind::invalid_argument, "bad name"); }), Error);
  CHECK_FALSE(entries.find("b"));
  auto other = std::make_shared<JobEntry>();
  other->id = "a";
  CHECK(entries.adopt(other) == a);  // the one there stays
  CHECK(entries.remove("a") == a);
  CHECK_FALSE(entries.find("a"));
  CHECK_FALSE(entries.remove("a"));
}

TEST_CASE("publishing ends an entry once: final result, then its future and event; unfinished lists the rest") {
  JobEntries entries(std::chrono::hours(1));
  auto a = entries.add("a", [](JobEntry&) {});
  auto b = entries.add("b", [](JobEntry&) {});
  CHECK(entries.unfinished().size() == 2);
  entries.end(*a, result(JobState::done));
  REQUIRE(a->final_result);
  CHECK(a->final_result->state == JobState::done);
  CHECK_FALSE(a->ended.is_set());  // resolve() completes it
  JobEntries::resolve(*a, result(JobState::done));
  CHECK(a->ended.is_set());
  CHECK(a->future.get().state == JobState::done);
  entries.publish(*b, result(JobState::failed));
  CHECK(b->ended.is_set());
  CHECK(entries.unfinished().empty());
}

TEST_CASE("finished entries are forgotten after the ttl; unfinished ones never") {
  JobEntries entries(std::chrono::milliseconds(0));
  auto done = entries.add("done", [](JobEntry&) {});
  auto running = entries.add("running", [](JobEntry&) {});
  entries.publish(*done, result(JobState::done));
  const auto ended = done->ended_at;
  while (JobEntries::clock::now() == ended) std::this_thread::yield();  // the ttl (0) has passed
  entries.expire();
  CHECK_FALSE(entries.find("done"));
  CHECK(entries.find("running") == running);
  CHECK(done->future.get().state == JobState::done);  // a handle keeps its entry
}
