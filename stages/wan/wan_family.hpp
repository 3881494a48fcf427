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
//  decode    un-normalise with latents mean/std, VAE decode, frames in [0, 1].
// Ownership: shared by the jobs of its package; the text cache and the module cache are
// thread-safe. Includes LibTorch.
#pragma once

#include "stages/family.hpp"
#include "stages/lora_variants.hpp"
#include "stages/model_backend.hpp"
#include "stages/text_context.hpp"
#include "stages/tokenizer.hpp"

namespace vgen {

// A Wan job's state: the generic FamilyJob plus its text rows.
struct WanJob : FamilyJob {
  at::Tensor embeds;  // [1 or 2, L, D]: cond (and uncond when guidance > 1), zero past each text
  std::vector<std::int64_t> embed_lengths;  // per row of embeds: its text's rows
  TextContext text;  // the rows at the denoise group's row count (set by begin_denoise)
  std::shared_ptr<const Module> transformer;  // with the group's LoRA set merged (set by predict)
};

class WanFamily final : public Family {
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
  LoraVariantStats lora_stats() const { return variants_->stats(); }

  // One transformer call on `device`: forward on the zero-padded max_length context (bias
  // undefined), or forward_compact with the compact form's key bias. x is cast to the
  // transformer's dtype, t is float32; returns the flow prediction on the device.
  // `transformer`: the module to call (a LoRA variant); null: the package's.
  at::Tensor predict_flow(const std::string& device, const at::Tensor& x, const at::Tensor& t, const at::Tensor& context,
                          const at::Tensor& bias, std::shared_ptr<const Module> transformer = nullptr);

 private:
  std::shared_ptr<const Module> module(const std::string& component, const std::string& device) const;
  TextRows encode_text(const std::string& device, const std::vector<std::string>& texts);
  ContentKey text_key(const std::string& device, const std::string& text) const;
  std::shared_ptr<const Module> group_transformer(const std::vector<FamilyJob*>& live, const std::string& device);

  ModelPackage package_;
  std::string backend_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<TtlCache<at::Tensor>> text_cache_;  // null when off
  std::shared_ptr<LoraLibrary> loras_;                // files under lora_dir
  std::shared_ptr<LoraVariants> variants_;            // merged transformers, per device
  mutable std::mutex shapes_mutex_;
  mutable ParameterShapes transformer_shapes_;        // read from the first loaded transformer: validate maps LoRA keys onto it
};

std::shared_ptr<Family> make_wan_family(ModelPackage package, const FamilyOptions& options);

// WanPipeline's prompt_clean without ftfy: HTML-unescape (twice), collapse whitespace, strip.
std::string wan_prompt_clean(const std::string& text);

// The scheduler a job uses: the package's, or `override_type` configured from the package's
// flow shift and training steps.
std::unique_ptr<Scheduler> make_wan_scheduler(const ModelPackage& package, const std::string& override_type);

}  // namespace vgen
