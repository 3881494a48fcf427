#include "runtime/job.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

using namespace vgen;

TEST_CASE("a job moves through its states and ends exactly once") {
  Job job("j1", boost::json::object{{"prompt", "x"}});
  std::vector<JobEvent> events;
  job.subscribe([&](const JobEvent& e) { events.push_back(e); });
  CHECK(job.state() == JobState::queued);
  CHECK(job.snapshot().status() == "queued");
  job.enter_stage("first");
  job.enter_stage("second");
  CHECK(job.state() == JobState::running);
  CHECK(job.snapshot().stage == "second");
  CHECK(job.snapshot().status() == "second");  // a running job shows its stage's name
  job.report_progress(3, 10);
  CHECK(job.snapshot().step == 3);
  CHECK(job.finish(JobState::done));
  CHECK_FALSE(job.finish(JobState::failed));  // first call wins
  CHECK(job.state() == JobState::done);
  CHECK(job.snapshot().status() == "done");
  CHECK(job.finished_event().is_set());
  job.enter_stage("third");  // ignored after the end
  CHECK(job.state() == JobState::done);
  REQUIRE(events.size() == 4);
  CHECK(events[0].status() == "first");
  CHECK(events[1].state == JobState::running);
  CHECK(events[1].stage == "second");
  CHECK(events[2].step == 3);
  CHECK(events[2].total == 10);
  CHECK(events[2].status() == "second");
  CHECK(events[3].state == JobState::done);
  CHECK(events[3].status() == "done");
  CHECK_THROWS_AS(job.finish(JobState::running), Error);
}

TEST_CASE("a requeued job is queued again, then runs its stage anew") {
  Job job("j1", {});
  job.enter_stage("only");
  job.return_to_queue();
  CHECK(job.state() == JobState::queued);
  CHECK(job.snapshot().status() == "queued");
  job.enter_stage("only");
  CHECK(job.snapshot().status() == "only");
}

namespace {
struct Picture : JobAttachment {
  explicit Picture(std::string b) : bytes(std::move(b)) {}
  std::string bytes;
};
}  // namespace

TEST_CASE("an attachment is kept as the latest of its name and announced once, never after the end") {
  Job job("j1", boost::json::object{{"prompt", "x"}});
  std::vector<JobEvent> events;
  job.subscribe([&](const JobEvent& e) { events.push_back(e); });
  job.enter_stage("work");
  CHECK_FALSE(job.attachment("picture"));
  auto first = std::make_shared<Picture>("one");
  auto second = std::make_shared<Picture>("two");
  job.publish("picture", first, 2, 8);
  job.report_progress(3, 8);
  job.publish("picture", second, 4, 8);
  job.publish("other", first, 4, 8);
  CHECK(job.attachment("picture") == second);
  CHECK(job.attachment("other") == first);
  CHECK(job.snapshot().step == 3);  // an attachment leaves the job's own progress alone
  job.publish("picture", nullptr, 5, 8);  // nothing: nothing changes
  CHECK(job.attachment("picture") == second);
  job.finish(JobState::done);
  job.publish("picture", first, 6, 8);  // after the end: ignored
  CHECK(job.attachment("picture") == second);
  REQUIRE(events.size() == 6);  // work, picture, progress, picture, other, done
  CHECK(events[1].attachment == first);
  CHECK(events[1].attachment_name == "picture");
  CHECK(events[1].step == 2);
  CHECK(events[1].total == 8);
  CHECK_FALSE(events[2].attachment);
  CHECK(std::dynamic_pointer_cast<const Picture>(events[3].attachment)->bytes == "two");
  CHECK(events[3].status() == "work");
  CHECK(events[4].attachment_name == "other");
  CHECK_FALSE(events[5].attachment);
}

TEST_CASE("a stage's detail rides on its progress events and in the job's lasting detail") {
  Job job("j1", {});
  std::vector<JobEvent> events;
  job.subscribe([&](const JobEvent& e) { events.push_back(e); });
  job.enter_stage("work");
  job.edit_detail([](boost::json::object& d) { d["count"] = 2; });
  job.report_progress(4, 10, boost::json::object{{"news", "here"}}, "a note");
  job.report_progress(5, 10);
  REQUIRE(events.size() == 3);
  CHECK(events[0].detail.empty());  // a state change says nothing more
  CHECK(events[1].detail.at("news") == "here");
  CHECK(events[1].message == "a note");
  CHECK(events[2].detail.empty());
  const auto s = job.snapshot();
  CHECK(s.detail.at("count") == 2);
  CHECK(s.step == 5);
}

TEST_CASE("failure keeps a classified error") {
  Job job("j2", {});
  job.finish(JobState::failed, std::make_exception_ptr(Error(ErrorKind::invalid_argument, "width must be a multiple of 16")));
  auto s = job.snapshot();
  CHECK(s.state == JobState::failed);
  REQUIRE(s.error_kind);
  CHECK(*s.error_kind == ErrorKind::invalid_argument);
  CHECK(s.error == "width must be a multiple of 16");
}

TEST_CASE("cancellation and deadlines are observed by throw_if_cancelled") {
  Job job("j3", {});
  CHECK_NOTHROW(job.throw_if_cancelled());
  CHECK(job.request_cancel());
  CHECK(job.cancel_event().is_set());
  CHECK_THROWS_AS(job.throw_if_cancelled(), Error);
  try {
    job.throw_if_cancelled();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::cancelled);
  }
  Job late("j4", {}, Job::clock::now() - std::chrono::seconds(1));
  try {
    late.throw_if_cancelled();
    FAIL("expected deadline_exceeded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::deadline_exceeded);
  }
  Job done("j5", {});
  done.finish(JobState::done);
  CHECK_FALSE(done.request_cancel());
}

TEST_CASE("concurrent finish calls end the job once" * doctest::timeout(30)) {
  for (int round = 0; round < 50; ++round) {
    Job job("race", {});
    std::atomic<int> winners{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < 4; ++i)
      ts.emplace_back([&, i] {
        if (job.finish(i % 2 ? JobState::done : JobState::cancelled)) ++winners;
      });
    for (auto& t : ts) t.join();
    CHECK(winners == 1);
  }
}

TEST_CASE("priority comes from the spec (clamped); a requeue request is taken once") {
  CHECK(Job("a", boost::json::object{{"prompt", "x"}}).priority() == 0);
  CHECK(Job("b", boost::json::object{{"priority", 7}}).priority() == 7);
  CHECK(Job("c", boost::json::object{{"priority", 100000}}).priority() == Job::kMaxPriority);
  CHECK(Job("d", boost::json::object{{"priority", "high"}}).priority() == 0);  // the spec's validation names it
  Job job("j", boost::json::object{{"priority", -3}});
  CHECK(job.snapshot().priority == -3);
  CHECK_FALSE(job.take_requeue());
  job.request_requeue();
  CHECK(job.take_requeue());
  CHECK_FALSE(job.take_requeue());  // taken once
}
