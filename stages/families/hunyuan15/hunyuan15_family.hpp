// The HunyuanVideo 1.5 family (diffusers' HunyuanVideo15Pipeline, and its image-to-video twin
// HunyuanVideo15ImageToVideoPipeline) behind the model-family interface
// (stages/families/family.hpp), registered as "hunyuan-video-1.5" by register_hunyuan15_family();
// packages come from `python -m vgen_export.hunyuan15`.
//
//  prepare   two text encoders per text, each distinct text once per group through the TTL cache:
//            Qwen 2.5-VL on the chat template (manifest text.template: the system message and
//            the prompt, " " for an empty one), byte-level BPE (stages/text/bpe_tokenizer.hpp),
//            right-padded to crop_start + max_length, the template's first crop_start tokens
//            cut off after the encoder; ByT5 on the prompt's quoted glyph texts (`Text "..."`,
//            bytes + 3, </s>, 256 long), zeros and a zero mask without quotes. The initial noise
//            from the job's own seeded CPU generator. Image-to-video (the package's inputs.image
//            "required", with vae_encoder.pt and image_encoder.pt): the job's picture fitted to
//            its size, its scaled VAE latents and SigLIP tokens (stages/families/hunyuan15/
//            hunyuan15_i2v.hpp), kept on the job.
//  scheduler FlowMatchEuler on the pipeline's sigmas linspace(1, 0, n + 1)[:-1], shifted by the
//            config's shift (or the job's), stages/schedulers/flow_match_sigmas.cpp.
//  predict   one transformer call for every job's rows (uncond, cond with guidance; cond
//            alone without), image-to-video rows with their job's condition latents and image
//            tokens (the same in both rows, as the pipeline passes them); the guider's
//            classifier-free guidance per job in float32:
//            uncond + g (cond - uncond), skipped when g is 1 (ClassifierFreeGuidance's test,
//            math.isclose), so g < 1 still guides, as diffusers does.
//  decode    latents / scaling_factor through the VAE decoder; frames (v / 2 + 0.5) in [0, 1].
// Sizes are multiples of the VAE's 16 (patch size 1: the manifest's resolution), frames 4k + 1;
// a job's `shift` replaces the scheduler's; LoRAs are refused by name, and an image by a text-to-
// video package ("image", parse_job_spec), as is a job without one by an image-to-video package.
// The latents are stepped on every frame (the pipeline does not pin frame 0 to the picture).
// Ownership: shared by the jobs of its package; the text cache and the module cache are
// thread-safe, everything else is immutable after construction. Includes LibTorch.
#pragma once

#include "stages/families/family.hpp"
#include "stages/model/model_backend.hpp"
#include "stages/text/bpe_tokenizer.hpp"

#include <boost/json/object.hpp>

#include <optional>
#include <string>
#include <vector>

namespace vgen {

// A job's HunyuanVideo 1.5 state: its text rows, (uncond,) cond, as the transformer takes them.
struct Hunyuan15Job : FamilyJob {
  at::Tensor text;         // [1 or 2, max_length, D] Qwen hidden states after the crop
  at::Tensor text_mask;    // [1 or 2, max_length] float32
  at::Tensor glyph;        // [1 or 2, 256, D2] ByT5 states (zeros for a text without quotes)
  at::Tensor glyph_mask;   // [1 or 2, 256] float32
  // Image-to-video only (set by prepare): [1, C, 1, H', W'] latents x scaling_factor, [1, N, Di].
  at::Tensor image_condition;
  at::Tensor image_tokens;
};

// The manifest's "text" and "vae" sections.
struct Hunyuan15Config {
  std::string template_text;  // "...{system}...{prompt}..."
  std::string system_message;
  int crop_start = 108, max_length = 1000;
  int glyph_length = 256, glyph_offset = 3, glyph_eos = 1, glyph_pad = 0;
  std::int64_t glyph_dim = 0;
  double scaling_factor = 1.0;
};

class Hunyuan15Family final : public Family {
 public:
  Hunyuan15Family(ModelPackage package, const FamilyOptions& options);

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

  const Hunyuan15Config& config() const noexcept { return config_; }
  bool image_to_video() const noexcept { return image_; }
  // The chat-templated text the Qwen encoder reads for `prompt`.
  std::string templated(const std::string& prompt) const;

 private:
  std::shared_ptr<const Module> module(const std::string& component, const std::string& device) const;
  // [texts, max_length, D] float32 on the CPU; their masks [texts, max_length] float32.
  at::Tensor encode_texts(const std::string& device, const std::vector<std::string>& texts) const;
  at::Tensor text_masks(const std::vector<std::string>& texts) const;
  // [glyphs, 256, D2] float32 on the CPU for formatted glyph texts.
  at::Tensor encode_glyphs(const std::string& device, const std::vector<std::string>& glyphs) const;
  // `image`: image-to-video's (condition, tokens) rows, empty for text-to-video.
  at::Tensor transformer_call(const std::string& device, const std::string& precision, const at::Tensor& latents,
                              const at::Tensor& timestep, const at::Tensor& text, const at::Tensor& mask,
                              const at::Tensor& glyph, const at::Tensor& glyph_mask,
                              const std::vector<at::Tensor>& image = {}) const;
  void prepare_image(const std::string& device, Hunyuan15Job& job) const;
  at::Tensor decode_latents(const std::string& device, const at::Tensor& latents) const;

  ModelPackage package_;
  Hunyuan15Config config_;
  std::string backend_;
  bool image_ = false;  // image-to-video: manifest inputs.image
  std::shared_ptr<const BpeTokenizer> tokenizer_;
  std::shared_ptr<TtlCache<at::Tensor>> text_cache_;  // null when off
};

std::shared_ptr<Family> make_hunyuan15_family(ModelPackage package, const FamilyOptions& options);

// Reads the manifest's "text" and "vae" sections; Error(invalid_argument) naming a missing or
// bad field (the first form reads the package's own manifest).
Hunyuan15Config read_hunyuan15_config(const ModelPackage& package);
Hunyuan15Config read_hunyuan15_config(const ModelPackage& package, const boost::json::object& manifest);

// HunyuanVideo15Pipeline's extract_glyph_texts: the texts between "..." or “...” (no line
// break inside), deduplicated in order when more than one, as `Text "a". Text "b". `; nullopt
// without any.
std::optional<std::string> hunyuan15_glyph_text(const std::string& prompt);

// ByT5Tokenizer's ids of `text`: each UTF-8 byte + offset, except its added tokens (<pad>, </s>,
// <unk> = offset - 1, which strip the whitespace around them; <extra_id_N> = offset + 256 + N);
// cut to length - 1, then eos, right-padded with pad; mask 1 on real ids.
void byt5_ids(const std::string& text, int length, int offset, int eos, int pad, std::int64_t* ids, float* mask);

// ClassifierFreeGuidance's switch: guidance runs unless g is 1 (math.isclose, rel_tol 1e-9).
bool hunyuan15_uses_guidance(double guidance);

}  // namespace vgen
