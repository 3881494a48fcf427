#include "stages/exec/denoise_news.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace vgen;

TEST_CASE("scheduling news and step-cache counts ride on the generic detail, as before the split") {
  Job job("j", boost::json::object{{"priority", -3}});
  std::vector<JobEvent> events;
  job.subscribe([&](const JobEvent& e) { events.push_back(e); });
  job.enter_stage("denoise");
  report_scheduling(job, "preempted", 4, 10);
  record_skipped(job, 2);
  report_step(job, 5, 10);
  report_scheduling(job, "resumed", 4, 10);
  report_resumed(job, 6, 10);
  REQUIRE(events.size() == 5);
  CHECK(events[0].detail.empty());
  CHECK(scheduling_event(events[1]) == "preempted");
  CHECK(events[1].message == "preempted at step 4 of 10");
  CHECK(skipped(events[1]) == 0);
  CHECK_FALSE(events[1].detail.contains("skipped"));  // only once there are any
  CHECK(scheduling_event(events[2]).empty());
  CHECK(skipped(events[2]) == 2);
  CHECK(events[2].step == 5);
  CHECK(scheduling_event(events[3]) == "resumed");
  CHECK(skipped(events[3]) == 2);
  CHECK(scheduling_event(events[4]) == "resumed");
  CHECK(events[4].message == "resumed at step 6 of 10 from a checkpoint");
  CHECK(skipped(events[4]) == 0);  // a checkpoint resume says nothing of the cache
  const auto s = job.snapshot();
  CHECK(preemptions(s) == 1);
  CHECK(skipped_steps(s) == 2);
  CHECK(s.step == 6);
  CHECK(s.status() == "denoise");
  // The detail's keys are what front ends show next to step and total (HTTP progress).
  CHECK(s.detail == boost::json::object{{"preemptions", 1}, {"skipped_steps", 2}});
}

TEST_CASE("a preview is the job's latest attachment of its name, announced once, never after the end") {
  Job job("j1", boost::json::object{{"prompt", "x"}});
  std::vector<JobEvent> events;
  job.subscribe([&](const JobEvent& e) { events.push_back(e); });
  job.enter_stage("denoise");
  CHECK_FALSE(latest_preview(job));
  auto make = [](int step, std::string bytes) {
    auto p = std::make_shared<JobPreview>();
    p->step = step;
    p->total = 8;
    p->width = p->height = 4;
    p->content_type = "image/png";
    p->bytes = std::move(bytes);
    return p;
  };
  const std::shared_ptr<const JobPreview> first = make(2, "one"), second = make(4, "two");
  report_preview(job, first);
  report_step(job, 3, 8);
  report_preview(job, second);
  CHECK(latest_preview(job) == second);
  report_preview(job, nullptr);  // no image: nothing changes
  CHECK(latest_preview(job) == second);
  job.finish(JobState::done);
  report_preview(job, first);  // after the end: ignored
  CHECK(latest_preview(job) == second);
  REQUIRE(events.size() == 5);  // denoise, preview, progress, preview, done
  CHECK(preview_of(events[1]) == first);
  CHECK(events[1].step == 2);
  CHECK(events[1].total == 8);
  CHECK(events[1].status() == "denoise");
  CHECK(job.snapshot().step == 3);  // a preview leaves the job's progress alone
  CHECK_FALSE(preview_of(events[2]));
  CHECK(preview_of(events[3])->bytes == "two");
  CHECK_FALSE(preview_of(events[4]));
}
