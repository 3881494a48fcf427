// The family kit (issue 33 item 5): what every family does the same way around its model calls,
// written once. A family's predict() and decode() call these instead of repeating the lines
// (LTX-Video, LTX-2 and HunyuanVideo 1.5 do; Wan uses make_text_cache, its guidance and frames are
// the same formulas, not yet switched over).
//
//  guide_rows   classifier-free guidance over one denoiser call's rows: job j's unconditional
//               row 2j and conditional row 2j + 1 -> uncond + g_j (cond - uncond), each job with
//               its own scale g_j, in the prediction's dtype (diffusers' ClassifierFreeGuidance
//               and the pipelines' inline `noise_uncond + g * (noise_text - noise_uncond)`).
//  make_text_cache  the package's text-embedding cache from the family options (null when off).
//  set_frames   a decoded batch [N, 3, F, H, W] in [-1, 1] -> each job's frames [F, H, W, 3] in
//               [0, 1]: (v / 2 + 0.5) clamped, as diffusers' video processor postprocesses.
//  job_first_frame  the picture an image job starts from: an extend job's first_frame, else its
//               image file decoded (stages/media/image_input.hpp; reads the file: compute thread).
// Pure functions of their tensors: thread-safe, no blocking, nothing to cancel. Includes LibTorch.
#pragma once

#include "stages/families/family.hpp"
#include "stages/media/image_input.hpp"

#include <memory>
#include <vector>

namespace vgen {

// pred: [2 * jobs.size(), ...] rows (uncond, cond) per job; returns [jobs.size(), ...].
// Error(internal) when the row count is not twice the job count.
at::Tensor guide_rows(const at::Tensor& pred, const std::vector<FamilyJob*>& jobs);

// A TTL cache of text embeddings, text_cache.entries and .ttl from the options and a 1 GiB cost
// cap; null when entries is 0 (the cache is off).
std::shared_ptr<TtlCache<at::Tensor>> make_text_cache(const FamilyOptions& options);

// The job's first-frame picture as decoded RGB, not yet fitted to the job's size; an extend job's
// is fitted already. Error(invalid_argument) naming "image" when the job has none or the file is bad.
RgbImage job_first_frame(const FamilyJob& job);

// One decoded clip [3, F, H, W] in [-1, 1], on any device -> its frames [F, H, W, 3] in [0, 1]
// in the clip's dtype on the CPU, computed on the clip's device before one copy (the families
// pass float32 clips: frames are float32).
at::Tensor clip_frames(const at::Tensor& clip);

// video: [jobs.size(), 3, F, H, W] on any device; sets each job's `frames` (clip_frames).
// Error(internal) on a count mismatch.
void set_frames(const at::Tensor& video, const std::vector<FamilyJob*>& jobs);

}  // namespace vgen
