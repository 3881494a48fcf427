// The Wan 2.1 text-to-video stages: preprocess -> denoise -> decode -> encode, over a model
// package (stages/model_package.hpp) and the runtime (pipeline, device pool, worker pools).
//
//  preprocess  validate the job against the package's limits; tokenize (SentencePiece);
//              text-encode [prompt; negative] through the TTL cache (identical prompts are
//              encoded once); initial noise from the job's own seed (CPU generator, so a job's
//              result never depends on what runs beside it or on which device).
//  denoise     scheduler loop; classifier-free guidance with cond and uncond in one batch;
//              one compute task per step, progress events and cancellation between steps.
//  decode      un-normalise with latents mean/std, VAE decode, frames in [0, 1].
//  encode      FFmpeg, atomic file (temp + rename).
// Compute runs on the worker pool of the device the DevicePool leases ("device:<id>"), so
// `--devices cpu,cpu` runs two replicas with their own threads.
//
// This header does not include LibTorch (apps include it next to spdlog; the torch wheel's
// bundled fmt must not meet Debian's): tensors live in stages/wan_job.hpp.
// Ownership: a WanRuntime is shared by all stages and jobs and must outlive the pipeline.
#pragma once

#include "runtime/device_pool.hpp"
#include "runtime/executor.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/ttl_cache.hpp"
#include "stages/encode.hpp"
#include "stages/job_spec.hpp"
#include "stages/model_package.hpp"

#include <filesystem>
#include <functional>
#include <map>
#include <memory>

namespace vgen {

struct WanRuntime;  // defined in stages/wan_job.hpp

struct WanRuntimeOptions {
  std::filesystem::path out_dir;
  std::string backend = "torchscript";
  EncodeOptions encode;  // format is taken from each job
  std::size_t text_cache_entries = 256;
  std::chrono::steady_clock::duration text_cache_ttl = std::chrono::minutes(30);
  std::size_t preprocess_workers = 1, denoise_workers = 1, decode_workers = 1, encode_workers = 1;
  // Cross-job batching (stages/job_batcher.hpp): up to max_batch compatible jobs per
  // transformer call (and per VAE call in decode), waiting at most batch_wait for a batch to
  // fill. 1: no batching.
  std::size_t max_batch = 1;
  std::chrono::milliseconds batch_wait{20};
  // Called on the compute thread before every denoiser call (fault injection's simulated
  // out-of-memory); may throw. Arguments: jobs in the call, device, first job id, its retries.
  std::function<void(std::size_t, const std::string&, const std::string&, int)> before_denoise;
  MetricsRegistry* metrics = nullptr;  // optional (outlives the runtime): batch-size histograms
};

// Loads the package and its tokenizer (Error(invalid_argument) naming what is wrong).
// The executor must hold a "device:<id>" pool per device and a "codec" pool.
std::shared_ptr<WanRuntime> make_wan_runtime(const std::filesystem::path& package_dir, Executor& executor,
                                             DevicePool& devices, WanRuntimeOptions options);
const ModelPackage& package_of(const WanRuntime& runtime);
CacheStats text_cache_stats(const WanRuntime& runtime);
// Preprocess groups (text-encoder calls) run so far, by size (cross-job batching).
std::map<std::size_t, std::uint64_t> preprocess_group_sizes(const WanRuntime& runtime);
// Denoise groups run so far, by size (cross-job batching).
std::map<std::size_t, std::uint64_t> denoise_group_sizes(const WanRuntime& runtime);
std::map<std::size_t, std::uint64_t> decode_group_sizes(const WanRuntime& runtime);  // VAE calls by size

std::vector<StageSpec> make_wan_stages(std::shared_ptr<WanRuntime> runtime);

// Loads the text encoder, transformer and VAE decoder for `device` and calls each twice at the
// package's smallest size (one latent frame pair, one text token run), discarding the outputs:
// LibTorch's profiling executor profiles a method's first call and optimises its graph on the
// second, and both are slow (docs/PERFORMANCE.md). Run it on `device`'s compute thread before
// jobs arrive. Touches no job state and bypasses the text cache. Not cancellable.
void warm_up(WanRuntime& runtime, const std::string& device);

// What a finished Wan job produced (valid once the job is done).
struct WanJobResult {
  JobSpec spec;
  std::filesystem::path output;
  bool text_cache_hit = false;
  std::string device;
};
WanJobResult wan_job_result(const Job& job);

// Parses a job spec against the package's defaults and limits (what preprocess does first).
JobSpec parse_wan_job(const ModelPackage& package, const boost::json::value& spec);

}  // namespace vgen
