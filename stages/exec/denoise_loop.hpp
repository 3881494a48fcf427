// The denoise step loop of one batched group, generic over the model-family interface.
//
//   begin_denoise -> the members form cohorts by their next step (one scheduler instance
//     each: the first member's): noise * init_noise_sigma, or for jobs resumed from a
//     checkpoint their saved rows and scheduler history -> until no member is left:
//       drop cancelled jobs; members whose last step is done take their final latents and
//       leave (their Batcher::join returns); admit jobs that joined the running group as a
//       new cohort (and begin_denoise again over all live jobs);
//       on the compute thread: each live row's step cache decides whether it needs the
//       denoiser (stages/step_cache.hpp); ONE predict call for the rows that do, each with its
//       own timestep; the skipped rows reuse their last call's change; one scheduler step per
//       cohort; each live job's StepState (step, latents row, scheduler row), the after_step
//       hook (checkpoints) and a progress event.
//
// A cohort's members share one scheduler (same denoise_key: configuration and steps; same
// step); a scheduler step is row-wise (stages/scheduler.hpp), so dropped rows get a zero
// prediction and touch no other row, and a job's numbers do not depend on who else is in the
// call (within the family's batching tolerance, tested to 1e-4).
// Preemption (stages/batcher.hpp): at a step boundary, after members that are done leave and
// before joiners are admitted, rows give way to higher-priority jobs waiting (the batcher's
// waiting probe) when the group has no room for them; such a row leaves with a copy of its
// StepState. Job events: "admitted" (a joiner, at its step), "preempted" (at its step),
// "resumed" (a preempted job entering a group again, at its step); progress events carry the
// job's step-cache skips so far.
// Metrics (BatcherOptions::metrics): vgen_denoise_admitted_total, vgen_denoise_preempted_total,
// vgen_denoise_resumed_total, vgen_step_cache_skipped_total.
// Threads: the loop runs on the group's strand (an io thread); each step's compute runs on
// placement.pool (the device's compute thread). Cancellation: between steps only (a step that
// started finishes).
#pragma once

#include "stages/exec/batcher.hpp"

#include <boost/asio/awaitable.hpp>

namespace vgen {

// Runs every step of `group` on `placement`. Members' state.latents hold their noise on entry
// and their final latents on return (members dropped on the way keep theirs).
// `batcher` (optional): its waiting probe decides preemption; it counts preemptions.
boost::asio::awaitable<void> run_denoise_loop(Batcher::Group& group, const Placement& placement,
                                              const BatcherOptions& options, Batcher* batcher = nullptr);

}  // namespace vgen
