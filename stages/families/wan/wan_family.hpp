// The Wan 2.1 text-to-video family (diffusers' WanPipeline) behind the model-family interface
// (stages/family.hpp), registered as "wan2.1-t2v" in stages/builtin_families.cpp.
//
//  prepare   tokenize (SentencePiece); text-encode [prompt; negative] through the TTL cache
//            (each distinct text once per group, identical prompts encoded once); initial
//            noise from the job's own seed (CPU generator: a job's result never depends on
//            what runs beside it or on which device).
//  predict   one transformer call for the group's cond and uncond rows together, the text
//            context at one row count per group (stages/text_context.hpp: the compact form
//            with a package that has forward_compact), then each job's guidance.
//  decode    un-normalise with latents mean/std, VAE decode, frames in [0, 1]; above a size
//            (FamilyOptions::decode, the manifest's "decode" section) in overlapping
//            spatial tiles blended as diffusers' enable_tiling() does (stages/exec/tiled_decode.hpp).
// Video-to-video (diffusers' WanVideoToVideoPipeline; a package with manifest inputs.video and
// a vae_encoder, stages/families/wan/wan_v2v.cpp): a job with a video starts from it instead of
// pure noise. prepare takes the video's first `frames` frames (fewer when the video is shorter,
// rounded down to 4k+1; the job's frames becomes that count), VAE-encodes them (posterior
// mean, normalised by latents mean/std), draws the same seeded noise as text-to-video and mixes
// it in at the schedule's step t_start = steps - min(int(steps * strength), steps) as the
// scheduler's add_noise / scale_noise do (sigma * noise + (1 - sigma) * latents); the job then
// enters the denoise loop at step t_start (StepState.step) with a fresh scheduler history.
// Two experts (Wan 2.2 A14B, "wan2.2-a14b-t2v"; manifest `experts`): `transformer` predicts
// while the step's timestep >= boundary_ratio * num_train_timesteps, `transformer_2` below,
// each with the job's guidance (diffusers' guidance_scale_2 default). A denoise group's jobs
// share the scheduler and its timesteps, so a group never mixes experts within a step.
// Ownership: shared by the jobs of its package; the text cache and the module cache are
// thread-safe. Includes LibTorch.
#pragma once

#include "stages/exec/tiled_decode_options.hpp"
#include "stages/families/family.hpp"
#include "stages/model/lora_variants.hpp"
#include "stages/model/model_backend.hpp"
#include "stages/families/wan/text_context.hpp"
#include "stages/text/tokenizer.hpp"

#include <atomic>

namespace vgen {

// A Wan job's state: the generic FamilyJob plus its text rows and, for image-to-video
// (stages/wan/wan_i2v_family.hpp), its image conditioning.
struct WanJob : FamilyJob {
  at::Tensor embeds;  // [1 or 2, L, D]: cond (and uncond when guidance > 1), zero past each text
  std::vector<std::int64_t> embed_lengths;  // per row of embeds: its text's rows
  TextContext text;  // the rows at the denoise group's row count (set by begin_denoise)
  // Image-to-video only (undefined for text-to-video):
  at::Tensor image;         // [3, H, W] float32 in [0, 1] at the job's size: the first frame
  at::Tensor last_image;    // the same for the last frame (first-last-frame packages)
  at::Tensor condition;     // [1, mask + C, F', H', W'] concatenated to the latents' channels
  at::Tensor image_embeds;  // [1, N, D] image tokens, the same for the cond and uncond rows
  std::shared_ptr<const Module> transformer;  // with the group's LoRA set merged (set by predict)
  // Video-to-video only: the input frames [F, 3, H, W] float32 in [0, 1] at the job's size when
  // given directly (tests, tools); else prepare decodes the spec's video file.
  at::Tensor video;
  // Wan VACE only (stages/families/wan/wan_vace.hpp): the mask frames and reference
  // pictures when given directly (as `video`: tests, tools; mask [F, 3, H, W] in [0, 1], each
  // reference [3, h, w] in [0, 1] at its own size), and the control input prepare builds,
  // [1, 96, R + F', H', W'].
  at::Tensor mask_video;
  std::vector<at::Tensor> reference_images;
  at::Tensor control;
};

// What a Wan package's manifest says beyond the generic package fields (stages/model/
// model_package.hpp reads only what every family has). Optional flags, false when absent
// (older packages), all measured by the exporter (docs/MODEL_PACKAGE.md).
struct WanConfig {
  // text_encoder.padding_invariant: encoding only up to the longest prompt gives the same rows
  // as all max_length tokens.
  bool text_padding_invariant = false;
  // text_encoder.output_masked: the encoder's rows past a prompt's tokens are exactly zero, so a
  // prompt's embedding can be kept at its own length.
  bool text_output_masked = false;
  // transformer.compact_context, with forward_compact listed in components.transformer.methods
  // and a masked text output: the transformer takes a compacted text context (the prompt rows,
  // one zero row weighted by a ln(count) key bias), measured equal to forward on the
  // zero-padded max_length context.
  bool transformer_compact_context = false;
};

// Reads the manifest's Wan flags from package.manifest (all false for a package built in
// memory, which has no manifest).
WanConfig read_wan_config(const ModelPackage& package);

class WanFamily : public Family {
 public:
  WanFamily(ModelPackage package, const FamilyOptions& options);

  const ModelPackage& package() const override { return package_; }
  JobSpec validate(const boost::json::value& spec) const override;
  std::shared_ptr<FamilyJob> create_job(JobSpec spec) const override;
  void prepare(const std::string& device, const std::vector<FamilyJob*>& jobs) override;
  std::unique_ptr<Scheduler> make_scheduler(const FamilyJob& job) const override;
  std::string denoise_key(const FamilyJob& job, const Scheduler& scheduler) const override;
  void begin_denoise(const std::vector<FamilyJob*>& group, const std::string& device) override;
  at::Tensor predict(const PredictCall& call) override;
  void decode(const std::string& device, const std::vector<FamilyJob*>& jobs) override;
  void warm_up(const std::string& device) override;
  CacheStats text_cache_stats() const override;
  CacheStats lora_cache_stats() const override;
  LoraVariantStats lora_stats() const { return variants_->stats(); }
  const WanConfig& config() const noexcept { return config_; }
  // The tiling the decoder uses: FamilyOptions::decode with the manifest's "decode" section.
  const TiledDecodeOptions& decode_tiling() const noexcept { return tiling_; }

  // One transformer call on `device`: forward on the zero-padded max_length context (bias
  // undefined), or forward_compact with the compact form's key bias; with `image` defined
  // (image-to-video) forward(x, t, context, image). x is cast to the transformer's dtype, t
  // is float32; returns the flow prediction on the device.
  // `transformer`: the module to call (a LoRA variant, the step's expert); null: the package's.
  // `extras` (Wan VACE): further inputs after the context, passed as they are.
  at::Tensor predict_flow(const std::string& device, const at::Tensor& x, const at::Tensor& t, const at::Tensor& context,
                          const at::Tensor& bias, const at::Tensor& image = {}, std::shared_ptr<const Module> transformer = nullptr,
                          const std::vector<at::Tensor>& extras = {});
  // The transformer component that predicts at `timestep` ("transformer" without experts).
  const std::string& expert_for(double timestep) const;
  at::Tensor predict_by_expert(const PredictCall& call);

 protected:
  // A family that conditions on more than text (image-to-video) sets the job's condition and
  // image_embeds here; called at the end of prepare and by warm_up, on the compute thread.
  virtual void condition(const std::string& device, WanJob& job);
  // The transformer's input for a call's rows x [jobs, C, F', H', W'] (the scheduler's latents):
  // by default each job's condition concatenated after its latents' channels (Wan 2.1 I2V), or
  // x itself. Runs on the compute thread.
  virtual at::Tensor denoiser_input(const std::vector<FamilyJob*>& jobs, const at::Tensor& x) const;
  // The transformer's timesteps for those rows, from the rows' own t (float32 [jobs]): by
  // default t itself (one per row). Rows are per job; predict repeats them for guidance.
  virtual at::Tensor denoiser_timesteps(const std::vector<FamilyJob*>& jobs, const at::Tensor& x, const at::Tensor& t) const;
  // Inputs after the text context for a call's rows, one row per job (predict repeats them for
  // guidance): by default none; Wan VACE's control latents and per-row scale.
  virtual std::vector<at::Tensor> extra_inputs(const std::vector<FamilyJob*>& jobs) const;
  // Latent frames the noise has beyond the video's (F - 1) / temporal_scale + 1: by default 0;
  // Wan VACE's reference images, one each, in front.
  virtual std::int64_t extra_latent_frames(const WanJob& job) const;
  // What a job's video is to the family: where denoising starts (video-to-video: strength,
  // t_start, the default); a control input decoded in prepare into WanJob::video, whose frames
  // set the job's frame count (Wan VACE); or the family's own, read in its condition(), which
  // then does its own spec checks (SkyReels-V2 diffusion forcing extends it).
  enum class VideoUse { start, control, own };
  virtual VideoUse video_use() const { return VideoUse::start; }
  std::shared_ptr<const Module> module(const std::string& component, const std::string& device) const;

 private:
  // Video-to-video (wan_v2v.cpp): the spec checks of a job with a video, and its start state
  // (latents and step) from its frames [F, 3, H, W] and its noise; on the compute thread.
  void validate_video(const JobSpec& spec) const;
  void start_from_video(const std::string& device, WanJob& job, const at::Tensor& frames, const at::Tensor& noise) const;
  TextRows encode_text(const std::string& device, const std::vector<std::string>& texts);
  std::shared_ptr<const Module> group_transformer(const std::vector<FamilyJob*>& live, const std::string& device);
  // Resolves, hashes and maps the job's LoRA files, then applies their suggested steps /
  // guidance / shift to the fields `fields` (the job's JSON) leaves out.
  void validate_loras(JobSpec& spec, const boost::json::object& fields, const SpecLimits& limits) const;
  // One tile's frames before the clamp (tiles are blended before clamping, as in diffusers).
  at::Tensor decode_tile(const Module& vae, const at::Tensor& z) const;

  ModelPackage package_;
  WanConfig config_;
  std::string backend_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<TtlCache<at::Tensor>> text_cache_;  // null when off
  double boundary_timestep_ = -1;                      // < 0: one transformer
  std::shared_ptr<LoraLibrary> loras_;                // files under lora_dir
  std::shared_ptr<LoraVariants> variants_;            // merged transformers, per device
  mutable std::mutex shapes_mutex_;
  mutable ParameterShapes transformer_shapes_;        // read from the first loaded transformer: validate maps LoRA keys onto it
  TiledDecodeOptions tiling_;
  // Whether the decoder has decode_unclamped (packages exported before it lack it): -1 unknown.
  mutable std::atomic<int> vae_unclamped_{-1};
};

std::shared_ptr<Family> make_wan_family(ModelPackage package, const FamilyOptions& options);

// Video-to-video: the job's input frames [F, 3, H, W] float32 in [0, 1] at its size, at most
// its `frames` of them, rounded down to temporal_scale k + 1: job.video when set, else the spec's
// video file decoded and each frame resized as images are (stages/media/image_input.hpp).
// Error(invalid_argument) naming "video" when the job has none or it does not decode. Reads
// and decodes the file: call it on the compute thread (prepare).
at::Tensor wan_job_video(const WanJob& job, int temporal_scale);
// The same for any video of the job: `given` when defined, else the file at `path`; errors name
// `field` (Wan VACE's mask_video).
at::Tensor wan_video_frames(const WanJob& job, const at::Tensor& given, const std::string& path, const std::string& field,
                            int temporal_scale);

// The VAE encoder's posterior mean [1, C, F', H', W'] normalised as the denoiser sees latents:
// (mean - latents_mean) * (1 / latents_std), float32, in diffusers' order of operations
// (video-to-video here; image-to-video in wan_i2v_family, which builds on this family).
at::Tensor wan_normalised_latents(const ModelPackage& package, const at::Tensor& mean);

// diffusers' get_timesteps: the first of `steps` steps a job at `strength` runs,
// steps - min(int(steps * strength), steps) (== steps: nothing left to denoise).
int wan_v2v_first_step(int steps, double strength);

// WanPipeline's prompt_clean without ftfy: HTML-unescape (twice), collapse whitespace, strip.
std::string wan_prompt_clean(const std::string& text);

// The scheduler a job uses: the package's, or `override_type` configured from the package's
// flow shift and training steps; `shift` > 0 replaces the flow shift (a job's "shift"), and is
// Error(invalid_argument) naming "shift" for a scheduler that has none.
std::unique_ptr<Scheduler> make_wan_scheduler(const ModelPackage& package, const std::string& override_type, double shift = 0);

}  // namespace vgen
