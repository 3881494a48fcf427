// The LTX-2 family (diffusers' LTX2Pipeline: text to video with its audio, one transformer for
// both) behind the model-family interface (stages/families/family.hpp), registered as "ltx2" by
// register_ltx2_family() (ltx2_family.cpp); packages come from `python -m vgen_export.ltx2`.
//
//  prepare   each prompt stripped, tokenized as Gemma's tokenizer does it for LTX2Pipeline
//            ([bos] + pieces, truncated to max_length, padded on the LEFT), then Gemma 3 and the
//            text connectors (one module: per text the video context, the audio context and the
//            connectors' mask), through the TTL cache, each distinct text once per group. From
//            the job's own seeded CPU generator, in LTX2Pipeline's order: the video noise
//            [1,C,F',H',W'] (packed to tokens), then the audio noise [1,Ca,La,M] (packed to
//            [1,La,Ca*M]), La = round(frames / fps * sample_rate / hop / ratio) as the pipeline.
//  state     StepState::latents is ONE row [1, S*C + La*Ca]: the packed video tokens, then the
//            packed audio tokens, flattened. LTX2Pipeline steps the two with two copies of one
//            FlowMatchEuler schedule, and its step is elementwise, so stepping the concatenation
//            is stepping both; the generic loop, batcher, checkpoints and step cache see one
//            sample per job.
//  scheduler FlowMatchEuler on linspace(1, 1/n, n), shifted by mu(video sequence length), as
//            LTX-Video (stages/schedulers/flow_match_sigmas.cpp); the job keeps its sigmas.
//  predict   one transformer call for every job's (uncond,) cond rows: each text's contexts and
//            mask, each job's rope bounds (video at its own frame rate, audio in seconds);
//            guidance as LTX2Pipeline computes it, in x0 space with the step's sigma
//            (x0 = x - v * sigma; x0_c + (g - 1)(x0_c - x0_u); back to v = (x - x0) / sigma),
//            one scale for video and audio (the pipeline's audio_guidance_scale=None); STG,
//            modality-isolation guidance and guidance rescale are not run.
//  decode    the video tokens unpacked, un-normalised (x * std / scaling_factor + mean) and
//            decoded to frames in [0, 1]; the audio tokens are kept on the job, normalised and
//            packed [1, La, Ca*M], exactly as LTX2Pipeline holds them when its loop ends
//            (Ltx2Job::audio_latents); with the package's audio_vae and vocoder, the audio decoder
//            (ltx2_audio.hpp) turns them into FamilyJob::audio, timed as the audio decode.
// Image-to-video (LTX2ImageToVideoPipeline, same package: manifest inputs.image "optional" and a
// vae_encoder.pt giving the posterior's mode): a job with an image encodes it (no draw), and
// normalised ((mode - mean) / std) it is latent frame 0 of the video noise, drawn as for text;
// that frame's tokens get video timestep 0 (the audio keeps the step's) and a zero velocity, so
// the Euler step leaves it exactly as it is (diffusers steps frames 1.. only). Image jobs denoise
// in their own groups. The image is not re-compressed through H.264 first (the pipeline's
// image_crf must be 0 to match).
// Refused by name: LoRAs ("loras"), a shift ("shift"), a last image ("last_image");
// frames that are not 8k+1 by the package limits ("frames"). The step cache runs as for any
// family (it compares and reuses whole rows, audio included).
// Ownership: shared by the jobs of its package; the text cache and the module cache are
// thread-safe, everything else is immutable after construction. Includes LibTorch.
#pragma once

#include "stages/families/family.hpp"
#include "stages/model/model_backend.hpp"
#include "stages/families/ltx2/ltx2_audio.hpp"
#include "stages/text/tokenizer.hpp"

#include <boost/json/object.hpp>

#include <array>

namespace vgen {

// A job's LTX-2 state: the generic FamilyJob plus its text rows, schedule and final audio.
struct Ltx2Job : FamilyJob {
  at::Tensor video_context, audio_context;  // [1 or 2, L, D]: (uncond,) cond, LTX2Pipeline's order
  at::Tensor text_mask;                     // [1 or 2, L] float32: the connectors' mask
  at::Tensor sigmas;                        // float32 [steps + 1]: the job's schedule (guidance in x0)
  // After decode: the final audio latents [1, La, Ca*M], normalised and packed.
  at::Tensor audio_latents;
  // Image-to-video only: the first frame's normalised latents [1, C, 1, H', W'] (set by prepare).
  at::Tensor condition;
  bool has_image() const { return has_first_frame(spec); }
};

// What the manifest says beyond the generic package fields.
struct Ltx2Config {
  int bos_id = 2;                                  // tokenizer.bos_id
  std::int64_t text_dim = 0;                       // text_encoder.video_dim (== audio_dim)
  std::array<std::int64_t, 3> scale_factors{8, 32, 32};  // transformer.rope: video rope scale
  std::int64_t causal_offset = 1, audio_scale = 4, audio_causal_offset = 1, rope_hop = 160, rope_rate = 16000;
  std::int64_t audio_channels = 8, audio_mel_bins = 16;  // audio.latent_channels, latent_mel_bins
  std::int64_t sample_rate = 16000, hop_length = 160, audio_ratio = 4;  // audio.*: latents per second
  double scaling_factor = 1.0;                     // vae.scaling_factor
};

class Ltx2Family final : public Family {
 public:
  Ltx2Family(ModelPackage package, const FamilyOptions& options);

  const ModelPackage& package() const override { return package_; }
  JobSpec validate(const boost::json::value& spec) const override;
  std::shared_ptr<FamilyJob> create_job(JobSpec spec) const override;
  void prepare(const std::string& device, const std::vector<FamilyJob*>& jobs) override;
  std::unique_ptr<Scheduler> make_scheduler(const FamilyJob& job) const override;
  std::string denoise_key(const FamilyJob& job, const Scheduler& scheduler) const override;
  at::Tensor predict(const PredictCall& call) override;
  std::string decode_key(const FamilyJob& job) const override;
  void decode(const std::string& device, const std::vector<FamilyJob*>& jobs) override;
  void warm_up(const std::string& device) override;
  CacheStats text_cache_stats() const override;

  const Ltx2Config& config() const noexcept { return config_; }
  // The job's latent sizes: video grid [F', H', W'] and audio latent frames La.
  std::array<std::int64_t, 3> video_grid(const JobSpec& spec) const;
  std::int64_t audio_frames(const JobSpec& spec) const;
  // Token ids and mask [texts, L] as LTX2Pipeline's Gemma tokenizer gives them (see above).
  std::pair<at::Tensor, at::Tensor> tokenize(const std::vector<std::string>& texts, std::string_view field) const;

 private:
  std::shared_ptr<const Module> module(const std::string& component, const std::string& device) const;
  at::Tensor encode_texts(const std::string& device, const std::vector<std::string>& texts) const;
  at::Tensor transformer_call(const std::string& device, const std::string& precision, const std::vector<at::Tensor>& inputs) const;
  at::Tensor decode_video(const std::string& device, const at::Tensor& tokens, std::int64_t f, std::int64_t h, std::int64_t w) const;
  at::Tensor first_frame_latents(const std::string& device, const FamilyJob& job) const;

  ModelPackage package_;
  Ltx2Config config_;
  std::string backend_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<TtlCache<at::Tensor>> text_cache_;  // null when off
  std::shared_ptr<Ltx2AudioDecoder> audio_;            // null for a package without sound
};

std::shared_ptr<Family> make_ltx2_family(ModelPackage package, const FamilyOptions& options);

// Reads the manifest's LTX-2 sections; Error(invalid_argument) naming a missing or bad field.
Ltx2Config read_ltx2_config(const ModelPackage& package);

// LTX2Pipeline's rope bounds (LTX2AudioVideoRotaryPosEmbed.prepare_video_coords /
// prepare_audio_coords, patch size 1), the same float32 operations: video [1, 3, F*H*W, 2]
// (frame bounds in seconds at `fps`, rows and columns in pixels), audio [1, 1, La, 2] (seconds).
at::Tensor ltx2_video_coords(std::int64_t f, std::int64_t h, std::int64_t w, double fps, const Ltx2Config& config);
at::Tensor ltx2_audio_coords(std::int64_t frames, const Ltx2Config& config);

// LTX2Pipeline's audio_num_frames: round(frames / fps * sample_rate / hop / ratio), half to even.
std::int64_t ltx2_audio_frames(int frames, double fps, const Ltx2Config& config);

}  // namespace vgen
