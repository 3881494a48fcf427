// The LTX-Video text-to-video family (diffusers' LTXPipeline) behind the model-family interface
// (stages/families/family.hpp), registered as "ltx-video" by register_ltx_family() (ltx_family.cpp);
// packages come from tools/export_ltx.py.
//
//  prepare   tokenize (SentencePiece, T5 layout) each prompt to max_length (128); T5 over all
//            max_length positions without a mask, as LTXPipeline runs it, through the TTL cache
//            (each distinct text once per group); the initial noise, and with a
//            timestep-conditioned VAE the decode noise after it, from the job's own seed (the
//            order LTXPipeline draws them from its generator).
//  scheduler FlowMatchEuler on the pipeline's sigmas linspace(1, 1/n, n), shifted by
//            mu(latent sequence length) (stages/schedulers/flow_match_sigmas.cpp).
//  predict   latents [N,C,F,H,W] packed to tokens [N,F*H*W,C] (patch size 1); one transformer
//            call for every job's uncond and cond rows, with each text's mask and each job's
//            rope coordinates (its own frame rate: jobs with different fps share a call); each
//            job's guidance in float32; unpacked back. Packing is a permutation and the Euler
//            step is elementwise, so stepping unpacked latents is stepping diffusers' packed ones.
//  decode    latents * std / scaling_factor + mean; with a conditioned decoder, noise mixed in
//            at decode_noise_scale and the decoder conditioned on decode_timestep; frames in [0, 1].
// Image-to-video (LTXImageToVideoPipeline, same package: manifest inputs.image "optional" and a
// vae_encoder.pt giving the posterior's [mean; std]): a job with an image draws, from its
// generator and before the initial noise, the posterior sample mean + std * noise; normalised,
// it is latent frame 0 of the initial latents; that frame's tokens get timestep 0 and its
// prediction is zeroed, so the Euler step leaves it exactly as it is (diffusers steps frames 1..
// only). Image jobs denoise in their own groups (per-token timesteps; text-to-video rows keep
// one timestep per row, as LTXPipeline passes them).
// Ownership: shared by the jobs of its package; the text cache and the module cache are
// thread-safe, everything else is immutable after construction. Includes LibTorch.
#pragma once

#include "stages/families/family.hpp"
#include "stages/model/model_backend.hpp"
#include "stages/text/tokenizer.hpp"

#include <boost/json/object.hpp>

namespace vgen {

// A job's LTX state: the generic FamilyJob plus its text rows and decode noise.
struct LtxJob : FamilyJob {
  at::Tensor embeds;        // [1 or 2, L, D]: (uncond,) cond, as LTXPipeline orders them
  at::Tensor text_mask;     // [1 or 2, L] float32, 1 on real tokens
  at::Tensor decode_noise;  // [1, C, F', H', W'] or undefined (unconditioned VAE or noise scale 0)
  // Image-to-video only:
  at::Tensor image;      // [3, H, W] float32 in [0, 1] at the job's size; undefined: the spec's file (if any)
  at::Tensor condition;  // [1, C, 1, H', W'] the first frame's normalised latents (set by prepare)
  bool has_image() const { return image.defined() || has_first_frame(spec); }
};

// What the manifest says beyond the generic package fields (its "transformer" and "vae").
struct LtxConfig {
  int patch_size = 1, patch_size_t = 1;
  double scaling_factor = 1.0;
  bool timestep_conditioning = false;
  double decode_timestep = 0.0, decode_noise_scale = 0.0;
};

class LtxFamily final : public Family {
 public:
  LtxFamily(ModelPackage package, const FamilyOptions& options);

  const ModelPackage& package() const override { return package_; }
  JobSpec validate(const boost::json::value& spec) const override;
  std::shared_ptr<FamilyJob> create_job(JobSpec spec) const override;
  void prepare(const std::string& device, const std::vector<FamilyJob*>& jobs) override;
  std::unique_ptr<Scheduler> make_scheduler(const FamilyJob& job) const override;
  std::string denoise_key(const FamilyJob& job, const Scheduler& scheduler) const override;
  at::Tensor predict(const PredictCall& call) override;
  void decode(const std::string& device, const std::vector<FamilyJob*>& jobs) override;
  void warm_up(const std::string& device) override;
  CacheStats text_cache_stats() const override;

  const LtxConfig& config() const noexcept { return config_; }

 private:
  std::shared_ptr<const Module> module(const std::string& component, const std::string& device) const;
  at::Tensor encode_texts(const std::string& device, const std::vector<std::string>& texts) const;
  // `precision`: the job's (ModelPackage::component_for picks the transformer variant).
  at::Tensor transformer_call(const std::string& device, const std::string& precision, const at::Tensor& latents, const at::Tensor& timestep,
                              const at::Tensor& embeds, const at::Tensor& mask, const at::Tensor& coords) const;
  at::Tensor decode_latents(const std::string& device, const at::Tensor& z, const at::Tensor& noise) const;
  at::Tensor first_frame_latents(const std::string& device, const LtxJob& job, at::Generator& gen) const;

  ModelPackage package_;
  LtxConfig config_;
  std::string backend_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<TtlCache<at::Tensor>> text_cache_;  // null when off
};

std::shared_ptr<Family> make_ltx_family(ModelPackage package, const FamilyOptions& options);

// Reads the manifest's LTX sections ("transformer", "vae"; the first form reads
// package.dir/manifest.json); Error(invalid_argument) naming a missing or bad field.
LtxConfig read_ltx_config(const ModelPackage& package);
LtxConfig read_ltx_config(const ModelPackage& package, const boost::json::object& manifest);

// The rope coordinates LTXPipeline gives a latent grid of f x h x w at `fps`: [1, 3, f*h*w]
// float32, frame/row/column times (temporal_scale / fps, spatial_scale, spatial_scale) and the
// patch sizes (the transformer divides by its base sizes). Same float32 operations as diffusers.
at::Tensor ltx_video_coords(std::int64_t f, std::int64_t h, std::int64_t w, double fps, const ModelPackage& package,
                            const LtxConfig& config);

// [N, C, F, H, W] <-> [N, F*H*W, C] (LTXPipeline's _pack_latents / _unpack_latents, patch size 1).
at::Tensor ltx_pack(const at::Tensor& latents);
at::Tensor ltx_unpack(const at::Tensor& tokens, std::int64_t f, std::int64_t h, std::int64_t w);

}  // namespace vgen
