// The denoise step loop of one batched group, generic over the model-family interface.
//
//   begin_denoise -> latents = noise * init_noise_sigma (rows stacked), or for jobs resumed
//     from a checkpoint their saved rows and scheduler history -> for each remaining step:
//     drop cancelled jobs; predict (one call for the live rows, guidance inside the family);
//     one scheduler step for the group's latents as a batch; each live job's StepState (step,
//     latents row, scheduler row), the after_step hook (checkpoints) and a progress event
//     -> write the final latents back to each live job.
//
// The group's members share one scheduler (same denoise_key: configuration and steps); a
// scheduler step is row-wise (stages/scheduler.hpp), so dropped rows get a zero prediction and
// touch no other row. Each member's StepState (stages/family.hpp) holds, after every step,
// all a job needs to go on elsewhere: checkpoints use it now; the step cache, jobs joining a
// running group and preemption can attach to it next.
// Threads: the loop runs on an io thread; each step's compute runs on placement.pool (the
// device's compute thread). Cancellation: between steps only (a step that started finishes).
#pragma once

#include "stages/batcher.hpp"

#include <boost/asio/awaitable.hpp>

namespace vgen {

// Runs every step of `group` on `placement`. Members' state.latents hold their noise on entry
// and their final latents on return (members dropped on the way keep theirs).
boost::asio::awaitable<void> run_denoise_loop(Batcher::Group& group, const Placement& placement,
                                              const BatcherOptions& options);

}  // namespace vgen
