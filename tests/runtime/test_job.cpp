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
  job.enter_stage(JobState::preprocess);
  job.enter_stage(JobState::denoise);
  job.report_progress(3, 10);
  CHECK(job.snapshot().step == 3);
  CHECK(job.finish(JobState::done));
  CHECK_FALSE(job.finish(JobState::failed));  // first call wins
  CHECK(job.state() == JobState::done);
  CHECK(job.finished_event().is_set());
  job.enter_stage(JobState::decode);  // ignored after the end
  CHECK(job.state() == JobState::done);
  REQUIRE(events.size() == 4);
  CHECK(events[2].step == 3);
  CHECK(events[2].total == 10);
  CHECK(events[3].state == JobState::done);
  CHECK_THROWS_AS(job.finish(JobState::denoise), Error);
}

TEST_CASE("a preview is kept as the latest and announced once, never after the end") {
  Job job("j1", boost::json::object{{"prompt", "x"}});
  std::vector<JobEvent> events;
  job.subscribe([&](const JobEvent& e) { events.push_back(e); });
  job.enter_stage(JobState::denoise);
  CHECK_FALSE(job.latest_preview());
  auto first = std::make_shared<JobPreview>(JobPreview{2, 8, 4, 4, "image/png", "one"});
  auto second = std::make_shared<JobPreview>(JobPreview{4, 8, 4, 4, "image/png", "two"});
  job.report_preview(first);
  job.report_progress(3, 8);
  job.report_preview(second);
  CHECK(job.latest_preview() == second);
  job.report_preview(nullptr);  // no image: nothing changes
  CHECK(job.latest_preview() == second);
  job.finish(JobState::done);
  job.report_preview(first);  // after the end: ignored
  CHECK(job.latest_preview() == second);
  REQUIRE(events.size() == 5);  // denoise, preview, progress, preview, done
  CHECK(events[1].preview == first);
  CHECK(events[1].step == 2);
  CHECK(events[1].total == 8);
  CHECK_FALSE(events[2].preview);
  CHECK(events[3].preview->bytes == "two");
  CHECK(events[3].state == JobState::denoise);
  CHECK_FALSE(events[4].preview);
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

TEST_CASE("priority comes from the spec (clamped); scheduling events are counted and carried") {
  CHECK(Job("a", boost::json::object{{"prompt", "x"}}).priority() == 0);
  CHECK(Job("b", boost::json::object{{"priority", 7}}).priority() == 7);
  CHECK(Job("c", boost::json::object{{"priority", 100000}}).priority() == Job::kMaxPriority);
  CHECK(Job("d", boost::json::object{{"priority", "high"}}).priority() == 0);  // the spec's validation names it
  Job job("j", boost::json::object{{"priority", -3}});
  std::vector<JobEvent> events;
  job.subscribe([&](const JobEvent& e) { events.push_back(e); });
  job.enter_stage(JobState::denoise);
  job.report_scheduling("preempted", 4, 10);
  job.record_skipped(2);
  job.report_progress(5, 10);
  job.report_scheduling("resumed", 4, 10);
  REQUIRE(events.size() == 4);
  CHECK(events[1].event == "preempted");
  CHECK(events[1].message == "preempted at step 4 of 10");
  CHECK(events[2].event.empty());
  CHECK(events[2].skipped == 2);
  CHECK(events[3].event == "resumed");
  const auto s = job.snapshot();
  CHECK(s.priority == -3);
  CHECK(s.preemptions == 1);
  CHECK(s.skipped_steps == 2);
  CHECK_FALSE(job.take_requeue());
  job.request_requeue();
  CHECK(job.take_requeue());
  CHECK_FALSE(job.take_requeue());  // taken once
}
