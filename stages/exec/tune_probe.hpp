// TuneProbe: the AutoTuner's measure (stages/exec/auto_tune.hpp) for a loaded model: times the
// family's denoiser and decoder for one job shape at a batch size and a compute split.
//
// measure(setting) starts setting.leases threads, each with setting.intra_op LibTorch threads
// and its own group of setting.batch jobs (prepared once per lease and batch: text encoding and
// noise are not timed). Each thread calls the denoiser once to warm up (in the first measure
// the denoiser and the decoder twice: a TorchScript method's first two calls profile and
// optimise, once per process, not per shape), then all together call the denoiser
// kCalls times and the decoder once; the wall time of those rounds, divided per call, is the
// sample. Out of memory on any thread makes the sample out_of_memory; other errors are thrown.
//
// The shape is the job spec's (validated by its model; unset fields take the package defaults).
// shape_key() names the package and what of the spec decides the model calls' cost (size,
// frames, steps, guidance on/off, shift, LoRAs, step cache, an image or not; not the prompt,
// seed, name, format or priority), the device type and the backend that serves each model
// component there (backends_key: a compiled .pt2 and its TorchScript twin run at different
// speeds, so a choice measured on one is not reused for the other): the AutoTuner's cache key,
// computed without running any model (a start that finds its choice cached costs nothing;
// planning the backends reads a .pt2's metadata, not its code). key() is the denoise group key
// jobs of that shape get ("denoise|" + Family::denoise_key), what the Batcher reports to
// on_capped; computing it prepares one job (text encoding), so it is done on first use.
// This header does not include LibTorch (api/ uses it). Thread-safety: one measure() at a time;
// it blocks the caller until its threads end; key() and measure() must not run at once.
// Not cancellable.
#pragma once

#include "stages/exec/auto_tune.hpp"
#include "stages/exec/model_set.hpp"

#include <boost/json/value.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace vgen {

struct ModelPackage;  // stages/model/model_package.hpp

// "text_encoder=torchscript,transformer=aoti,vae_decoder=torchscript": the backend that would
// serve each model component (TorchScript or compiled; not the tokenizer) of `package` on
// `device`'s type with the family's backend `preference` (plan_component_backend: no module
// is loaded). A component nothing can serve is named "refused". Thread-safe.
std::string backends_key(const ModelPackage& package, std::string_view device, std::string_view preference = "auto");

class TuneProbe {
 public:
  static constexpr int kCalls = 2;  // timed denoiser calls per sample

  // Error(invalid_argument) if the spec is not valid for its model. `backend`: the families'
  // backend preference (ModelSetOptions::backend), for the key's backends.
  TuneProbe(const LoadedModels& models, const boost::json::value& spec, std::string device, std::string_view backend = "auto");
  ~TuneProbe();
  // Clips per decode call, as the jobs' (batching.max_decode_batch; 0: the whole batch). Before measure().
  void set_decode_batch(std::size_t clips);
  TuneProbe(const TuneProbe&) = delete;
  TuneProbe& operator=(const TuneProbe&) = delete;

  const std::string& shape_key() const;  // the tuner's cache key (cheap)
  const std::string& key();              // the shape's denoise group key (prepares one job)
  int steps() const;               // the shape's denoising steps
  const std::string& model() const;  // the model's name

  TuneSample measure(const TuneSetting& setting);
  // Frees every group measure() prepared (embeddings, latents, frames: device memory on a GPU).
  // A later measure() prepares again.
  void release();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace vgen
