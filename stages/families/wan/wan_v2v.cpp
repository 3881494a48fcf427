// Wan video-to-video (diffusers 0.42.1 WanVideoToVideoPipeline), part of WanFamily
// (stages/families/wan/wan_family.hpp states the contract).
#include "stages/families/wan/wan_family.hpp"

#include "runtime/errors.hpp"
#include "stages/media/video_input.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace vgen {

at::Tensor wan_normalised_latents(const ModelPackage& p, const at::Tensor& mean) {
  const auto c = p.latent_channels;
  auto lat_mean = at::tensor(p.latents_mean, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto inv_std = 1.0 / at::tensor(p.latents_std, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  return (mean.to(at::kFloat) - lat_mean) * inv_std;  // diffusers' normalisation, in its order
}

int wan_v2v_first_step(int steps, double strength) {
  // int() truncates toward zero, as Python's int(num_inference_steps * strength).
  const int init = std::min(static_cast<int>(std::trunc(steps * strength)), steps);
  return std::max(steps - init, 0);
}

at::Tensor wan_job_video(const WanJob& job, int temporal_scale) {
  return wan_video_frames(job, job.video, job.spec.video, "video", temporal_scale);
}

at::Tensor wan_video_frames(const WanJob& job, const at::Tensor& given, const std::string& path, const std::string& field,
                            int temporal_scale) {
  at::Tensor frames;
  if (given.defined()) {
    frames = given.to(at::kFloat);
    if (frames.dim() != 4 || frames.size(1) != 3 || frames.size(2) != job.spec.height || frames.size(3) != job.spec.width)
      throw Error(ErrorKind::invalid_argument, field + ": must be [F, 3, " + std::to_string(job.spec.height) + ", " +
                                                   std::to_string(job.spec.width) + "] frames at the job's size");
  } else {
    if (path.empty()) throw Error(ErrorKind::invalid_argument, field + ": this job has no input video");
    // Admission already held the file to the operator's limits (videos.*) and decoded all of
    // it; the defaults here could be stricter than the configured ones, so only the frames
    // kept are bounded (by the job's frames).
    VideoLimits limits;
    limits.max_bytes = std::numeric_limits<std::uint64_t>::max();
    limits.max_frames = std::numeric_limits<int>::max();
    limits.max_seconds = std::numeric_limits<double>::max();
    limits.max_pixels = std::numeric_limits<std::int64_t>::max();
    limits.max_side = std::numeric_limits<int>::max();
    auto clip = decode_video_file(path, field, limits, job.spec.frames);
    std::vector<at::Tensor> out;
    for (auto& img : clip.kept) {
      // As diffusers' video processor: each frame resized to the job's size (the aspect ratio not
      // kept; stages/media/image_input.hpp states how swscale's Lanczos differs from PIL's).
      if (img.width != job.spec.width || img.height != job.spec.height) img = resize_rgb(img, job.spec.width, job.spec.height);
      auto rgb = at::from_blob(img.rgb.data(), {img.height, img.width, 3}, at::kByte);
      out.push_back(rgb.permute({2, 0, 1}).to(at::kFloat).div(255.0));  // copies out of img
    }
    if (out.empty()) throw Error(ErrorKind::invalid_argument, field + ": has no frames");
    frames = at::stack(out);
  }
  // Wan's VAE encodes a first frame, then temporal_scale frames per latent frame: the largest
  // such count the video and the job's frames allow.
  const auto n = std::min<std::int64_t>(frames.size(0), job.spec.frames);
  return frames.narrow(0, 0, (n - 1) / temporal_scale * temporal_scale + 1).contiguous();
}

void WanFamily::validate_video(const JobSpec& s) const {
  const auto& p = package_;
  if (boundary_timestep_ >= 0)
    throw Error(ErrorKind::invalid_argument, "video: not supported by the two-expert " + p.family + " package");
  if (wan_v2v_first_step(s.steps, s.strength) >= s.steps)
    throw Error(ErrorKind::invalid_argument, "strength: " + std::to_string(s.strength) + " of " + std::to_string(s.steps) +
                                                 " steps leaves no step to run (raise strength or steps)");
  // The flow schedulers mix noise in as sigma * noise + (1 - sigma) * x (their add_noise /
  // scale_noise); the others' add_noise is not ported.
  const auto scheduler = make_wan_scheduler(p, s.scheduler, s.shift);
  if (scheduler->name() != "FlowMatchEulerDiscreteScheduler" && scheduler->name() != "UniPCMultistepScheduler")
    throw Error(ErrorKind::invalid_argument, "scheduler: " + std::string(scheduler->name()) + " cannot start from a video");
}

void WanFamily::start_from_video(const std::string& device, WanJob& w, const at::Tensor& frames, const at::Tensor& noise) const {
  const auto& p = package_;
  // [F, 3, H, W] in [0, 1] -> [1, 3, F, H, W] in [-1, 1], as preprocess_video normalises.
  auto x = (frames.permute({1, 0, 2, 3}).unsqueeze(0) * 2 - 1).contiguous();
  auto vae = module("vae_encoder", device);
  // retrieve_latents(argmax): the posterior mean, normalised as the denoiser sees latents.
  auto init = wan_normalised_latents(p, vae->forward({x.to(vae->dtype())}).to(at::kCPU));
  if (init.sizes() != noise.sizes())
    throw Error(ErrorKind::internal, "video: encoded latents do not match the noise's shape");
  // The schedule the job will run, cut at t_start (get_timesteps); diffusers finds the start
  // sigma by the first timestep's index, which is t_start for a schedule without repeats.
  auto scheduler = make_scheduler(w);
  const int first = wan_v2v_first_step(w.spec.steps, w.spec.strength);
  const auto sigma = scheduler->sigmas()[first];  // float32 scalar
  w.state.latents = sigma * noise + at::rsub(sigma, 1) * init;
  w.state.step = first;
  // A fresh history (a multistep scheduler's warm-up starts at t_start, as in diffusers).
  w.state.scheduler = first > 0 ? scheduler->save_row(0) : SchedulerRowState{};
}

}  // namespace vgen
