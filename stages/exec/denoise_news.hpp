// What denoising says about a job, in the generic job record of runtime/job.hpp: the
// vocabulary the core does not know, written and read only through these functions.
//
//  - Previews: a JobPreview is the job's attachment "preview" (Job::publish); its event carries
//    it (preview_of), and latest_preview() reads the one the job keeps.
//  - Progress of a denoising step (report_step): the event's detail has "skipped" (denoiser
//    calls the step cache skipped for the job so far) once there are any.
//  - Scheduling news (report_scheduling): the event's detail has "event" ("admitted": joined a
//    running group at `step`; "preempted": left its group at `step` and went back to the queue;
//    "resumed": went on from `step` after a preemption or a checkpoint), and "skipped" as above;
//    the message says the same in words.
//  - The job's lasting detail (JobSnapshot::detail) has "preemptions" and "skipped_steps" once
//    they are above 0 (front ends show it with the job's progress as it is). The step a
//    checkpoint brought a job back to is the render's (ModelSet::resumed_from), not progress.
// Thread-safety: as Job's (any thread). None of these blocks.
#pragma once

#include "runtime/job.hpp"

#include <memory>
#include <string>
#include <string_view>

namespace vgen {

// A small image of what a job will look like (stages/exec/preview.hpp makes them while it
// denoises). Immutable once made: shared between the job, its events and readers.
struct JobPreview : JobAttachment {
  int step = 0, total = 0;   // the denoising step it shows, of total
  int width = 0, height = 0;
  std::string content_type;  // "image/png"
  std::string bytes;         // the encoded image
};

inline constexpr std::string_view kPreviewAttachment = "preview";

// Keeps `preview` as the job's latest and emits an event carrying it (ignored once finished).
void report_preview(Job& job, std::shared_ptr<const JobPreview> preview);
std::shared_ptr<const JobPreview> latest_preview(const Job& job);  // nullptr until the first
std::shared_ptr<const JobPreview> preview_of(const JobEvent& e);   // the event's new preview, if any

// Denoising progress: step of total.
void report_step(Job& job, int step, int total);
// The step cache skipped `n` more denoiser calls for this job (its next step event says so).
void record_skipped(Job& job, int n);
// "admitted", "preempted" or "resumed" at `step` of `total`; a preemption is counted.
void report_scheduling(Job& job, std::string_view event, int step, int total);
// Progress that did not start at 0: the job went on from a checkpoint at `step`.
void report_resumed(Job& job, int step, int total);

std::string scheduling_event(const JobEvent& e);  // "" for anything but scheduling news
int skipped(const JobEvent& e);                   // the event's "skipped" (0 without)
int preemptions(const JobSnapshot& s);
int skipped_steps(const JobSnapshot& s);

}  // namespace vgen
