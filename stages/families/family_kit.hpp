// The family kit (issue 33 item 5): what every family does the same way around its model calls,
// written once. A family's predict() and decode() call these instead of repeating the lines
// (LTX-Video and HunyuanVideo 1.5 do; Wan's are the same formulas, not yet switched over).
//
//  guide_rows   classifier-free guidance over one denoiser call's rows: job j's unconditional
//               row 2j and conditional row 2j + 1 -> uncond + g_j (cond - uncond), each job with
//               its own scale g_j, in the prediction's dtype (diffusers' ClassifierFreeGuidance
//               and the pipelines' inline `noise_uncond + g * (noise_text - noise_uncond)`).
//  set_frames   a decoded batch [N, 3, F, H, W] in [-1, 1] -> each job's frames [F, H, W, 3] in
//               [0, 1]: (v / 2 + 0.5) clamped, as diffusers' video processor postprocesses.
// Pure functions of their tensors: thread-safe, no blocking, nothing to cancel. Includes LibTorch.
#pragma once

#include "stages/families/family.hpp"

#include <vector>

namespace vgen {

// pred: [2 * jobs.size(), ...] rows (uncond, cond) per job; returns [jobs.size(), ...].
// Error(internal) when the row count is not twice the job count.
at::Tensor guide_rows(const at::Tensor& pred, const std::vector<FamilyJob*>& jobs);

// video: [jobs.size(), 3, F, H, W]; sets each job's `frames`. Error(internal) on a count mismatch.
void set_frames(const at::Tensor& video, const std::vector<FamilyJob*>& jobs);

}  // namespace vgen
