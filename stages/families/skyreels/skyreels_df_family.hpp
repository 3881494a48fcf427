// SkyReels-V2 diffusion forcing (diffusers 0.42 SkyReelsV2DiffusionForcingPipeline and
// SkyReelsV2DiffusionForcingVideoToVideoPipeline with SkyReelsV2Transformer3DModel), registered
// as "skyreels-v2-df". It is the Wan 2.1 text-to-video family (stages/families/wan/wan_family.hpp:
// text, noise, guidance, scheduler, decode) with
//   per-frame timesteps  the transformer takes timestep [rows, F'] (diffusion forcing) and the fps
//                        flag of each row (0 at 16 fps, else 1: the pipelines' fps embedding);
//   extension            a job with a video (manifest inputs.video; JobSpec::extend or a plain
//                        video) continues it: the video's last overlap_history frames (manifest
//                        extension.overlap_frames, 4k+1: SpecLimits::extend_overlap), fitted to
//                        the job's size and
//                        VAE-encoded (posterior mean, normalised), are the first P' = (overlap - 1)
//                        / temporal_scale + 1 latent frames of the job's `frames`-frame segment.
//                        Those frames are clean: at every step the transformer sees them as given
//                        with timestep 0 and only the other frames are denoised, as the V2V DF
//                        pipeline's timestep matrix does with num_pre_ready = P'. The decoded
//                        segment begins with the overlap again; a joined clip drops its first
//                        overlap_history frames (stages/media/clip_extension.hpp).
// Only the synchronous schedule (ar_step 0, causal_block_size 1): every frame that is denoised is
// at the same step, so one scheduler over the whole latents equals diffusers' per-frame
// scheduler copies (UniPC and FlowMatchEuler act element-wise). The scheduler also moves the
// prefix frames; nothing reads them (the transformer input and decode put the prefix back), so
// between steps a job's latents hold the prefix frames only after decode.
// addnoise_condition (diffusers' torch.randn_like on the prefix, unseeded) is not offered.
// Ownership and threads: as WanFamily; prepare's VAE call runs on the compute thread.
#pragma once

#include "stages/families/wan/wan_family.hpp"

namespace vgen {

// A SkyReels DF job: a Wan job plus the extension's clean prefix.
struct SkyReelsJob : WanJob {
  // [1, C, P', H', W'] float32 normalised latents of the video's last overlap_history frames
  // (undefined: text-to-video). Set by prepare: the last P' frames of FamilyJob::video_latents
  // (the video is a finished job's output: its own latents, nothing encoded) when they fit the
  // job, else the frames VAE-encoded; or before prepare (tests, tools), then kept.
  at::Tensor prefix;
  bool prefix_reused = false;  // prefix was not encoded from the frames
};

class SkyReelsDFFamily final : public WanFamily {
 public:
  SkyReelsDFFamily(ModelPackage package, const FamilyOptions& options);

  // WanFamily's checks, then: no LoRAs; with a video, frames at least overlap_history + 4 (one
  // new latent frame). Error(invalid_argument) naming the field.
  JobSpec validate(const boost::json::value& spec) const override;
  std::shared_ptr<FamilyJob> create_job(JobSpec spec) const override;
  // The package's scheduler (or the job's) as WanFamily makes it, UniPC with
  // vgen_corrector_sees_stepped_sample (stages/schedulers/unipc.cpp: diffusers' per-frame step
  // writes into the sample its last_sample views).
  std::unique_ptr<Scheduler> make_scheduler(const FamilyJob& job) const override;
  at::Tensor predict(const PredictCall& call) override;
  void decode(const std::string& device, const std::vector<FamilyJob*>& jobs) override;

  int overlap_history() const { return overlap_; }
  // Latent frames of the prefix: (overlap_history - 1) / temporal_scale + 1.
  int prefix_latent_frames() const;
  // How many jobs took their prefix from a finished job's latents (or a given one) instead of
  // encoding the video's frames.
  std::uint64_t prefixes_reused() const { return reused_.load(); }

 protected:
  void condition(const std::string& device, WanJob& job) override;
  at::Tensor denoiser_input(const std::vector<FamilyJob*>& jobs, const at::Tensor& x) const override;
  at::Tensor denoiser_timesteps(const std::vector<FamilyJob*>& jobs, const at::Tensor& x, const at::Tensor& t) const override;
  VideoUse video_use() const override { return VideoUse::own; }

 private:
  int overlap_ = 17;
  bool fps_embedding_ = true;
  std::atomic<std::uint64_t> reused_{0};
};

std::shared_ptr<Family> make_skyreels_df_family(ModelPackage package, const FamilyOptions& options);

// The last `count` frames of the job's video, [count, 3, H, W] float32 in [0, 1] at the job's size:
// job.video's when set (tests, tools), else the spec's video file decoded and each frame fitted as
// an extension fits them (stages/media/clip_extension.hpp). Error(invalid_argument) naming "video"
// when there is none, it does not decode, or it has fewer than `count` frames.
at::Tensor skyreels_overlap_frames(const WanJob& job, int count);

// diffusers' fps flag: 0 for 16 fps, else 1.
inline double skyreels_fps_flag(double fps) { return fps == 16.0 ? 0.0 : 1.0; }

}  // namespace vgen
