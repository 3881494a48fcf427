#include "stages/families/family_kit.hpp"

#include "runtime/errors.hpp"

#include <ATen/ATen.h>

namespace vgen {

RgbImage job_first_frame(const FamilyJob& job) {
  if (job.first_frame) return *job.first_frame;
  if (job.spec.image.empty()) throw_error(ErrorKind::invalid_argument, "image: this job has no input image");
  return decode_image_file(job.spec.image, "image");
}

at::Tensor guide_rows(const at::Tensor& pred, const std::vector<FamilyJob*>& jobs) {
  const auto n = static_cast<std::int64_t>(jobs.size());
  if (pred.size(0) != 2 * n)
    throw_error(ErrorKind::internal, "guide_rows: " + std::to_string(pred.size(0)) + " rows for " + std::to_string(n) + " jobs");
  std::vector<at::Tensor> rows;
  rows.reserve(jobs.size());
  for (std::int64_t j = 0; j < n; ++j) {
    const auto uncond = pred.narrow(0, 2 * j, 1), cond = pred.narrow(0, 2 * j + 1, 1);
    rows.push_back(uncond + jobs[static_cast<std::size_t>(j)]->spec.guidance * (cond - uncond));
  }
  return rows.size() == 1 ? rows[0] : at::cat(rows, 0);
}

at::Tensor clip_frames(const at::Tensor& clip) {
  // On the clip's device, then one copy: on a GPU the three passes over a float32 clip (81 frames
  // at 832x480: 388 MB) are the device's, not the host's single compute thread's.
  return (clip / 2 + 0.5).clamp(0, 1).permute({1, 2, 3, 0}).contiguous().to(at::kCPU);
}

void set_frames(const at::Tensor& video, const std::vector<FamilyJob*>& jobs) {
  if (video.size(0) != static_cast<std::int64_t>(jobs.size()))
    throw_error(ErrorKind::internal, "set_frames: " + std::to_string(video.size(0)) + " videos for " +
                                         std::to_string(jobs.size()) + " jobs");
  for (std::size_t j = 0; j < jobs.size(); ++j) jobs[j]->frames = clip_frames(video[static_cast<std::int64_t>(j)]);
}

std::shared_ptr<TtlCache<at::Tensor>> make_text_cache(const FamilyOptions& options) {
  if (options.text_cache.entries == 0) return nullptr;
  return std::make_shared<TtlCache<at::Tensor>>(TtlCacheOptions{
      .max_entries = options.text_cache.entries, .max_cost = 1ull << 30, .default_ttl = options.text_cache.ttl});
}

}  // namespace vgen
