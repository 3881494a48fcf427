// ModelSet: the model packages one Runtime serves, each run by the family its manifest names
// (stages/family.hpp), and the generic render stages over them:
//
//  preprocess  validate the job against its model; Family::prepare in a batched group; a job
//              whose base render is kept (options.base_frames) takes its clip and skips
//              denoise and decode (StageSpec::applies)
//  denoise     the step loop of a batched group (stages/denoise_loop.hpp)
//  decode      Family::decode in a batched group
//  interpolate only for jobs with JobSpec::interpolate > 1: frame interpolation (stages/post/)
//  upscale     only for jobs with JobSpec::upscale > 1: upscaling (stages/post/)
//  encode      FFmpeg into <out_dir>/<name or id>.<ext>, atomically (stages/encode.hpp)
// Groups never mix families or packages (stages/batcher.hpp). A job picks its model by the
// spec's "model" field (a name given in the constructor); without one, the first model.
// Compute runs on the worker pool of the device the DevicePool leases ("device:<id>"), so
// `--devices cpu,cpu` runs two replicas with their own threads.
//
// This header does not include LibTorch (api/ includes it next to spdlog; the torch wheel's
// bundled fmt must not meet Debian's).
// Ownership: the stages hold the ModelSet's state by shared_ptr; the executor and the device
// pool must outlive the pipeline running them. Thread-safety: every const member may be
// called from any thread; warm_up runs on the device's compute thread.
#pragma once

#include "runtime/device_pool.hpp"
#include "runtime/executor.hpp"
#include "runtime/metrics.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/ttl_cache.hpp"
#include "stages/exec/base_frames.hpp"
#include "stages/exec/batch_kind.hpp"
#include "stages/exec/batching_options.hpp"
#include "stages/exec/checkpoint.hpp"
#include "stages/exec/stage_options.hpp"
#include "stages/families/family_options.hpp"
#include "stages/media/encode.hpp"
#include "stages/media/image_input.hpp"
#include "stages/media/live_broadcast.hpp"
#include "stages/media/video_input.hpp"
#include "stages/job_spec.hpp"
#include "stages/model/model_package.hpp"
#include "stages/post/post_process.hpp"

#include <boost/json/value.hpp>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace vgen {

// The components' own options, held whole (a Runtime hands its config's down untouched):
// a new knob of the encoder, the batcher or a cache is added to its struct, not copied here.
struct ModelSetOptions {
  std::filesystem::path out_dir;
  std::string backend = "auto";  // FamilyOptions::backend
  EncodeOptions encode;  // format and comment are taken from each job
  TextCacheOptions text_cache;  // each family's (stages/families/family_options.hpp)
  LoraOptions lora;
  // Workers and queue per stage, by the names stages() gives (a name missing: its default).
  StageOptionsMap stages = default_stage_options();
  BatchingOptions batching;  // the Batcher's (max_batch 0 counts as 1)
  // The largest max_batch set_max_batch may switch to (the auto-tuner's search still running):
  // the model stages' workers are sized for it. 0: batching.max_batch.
  std::size_t max_batch_limit = 0;
  // Compute leases of all devices together (threads.per_device x devices): as many groups can
  // run at once, so the model stages get at least max_batch x leases workers.
  std::size_t leases = 1;
  // Called on the compute thread before every denoiser call (fault injection's simulated
  // out-of-memory); may throw. Arguments: jobs in the call, device, first job id, its retries.
  std::function<void(std::size_t, const std::string&, const std::string&, int)> before_denoise;
  // Called when out of memory caps a group key's batch (stages/batcher.hpp on_capped).
  std::function<void(const std::string& key, std::size_t cap)> on_batch_capped;
  // Called after every model call (stages/exec/batcher.hpp on_model_call): the auto-tuner
  // learns the timings of running jobs.
  std::function<void(BatchKind kind, const std::string& key, std::size_t jobs, double seconds)> on_model_call;
  MetricsRegistry* metrics = nullptr;  // optional (outlives the set): batch-size histograms
  Tracer* tracer = nullptr;            // optional (outlives the set): spans of model calls
  // Live previews (stages/preview.hpp): every this many denoising steps and at the last; 0: none.
  // Jobs of a package without preview factors get none.
  int preview_every = 0;
  ImageLimits images;                  // what admit() accepts of a job's image files
  VideoLimits videos;                  // ... and of its video file (video-to-video)
  // Step checkpoints (stages/checkpoint.hpp): off unless checkpoints.dir is set. on_checkpoint
  // is told each durable checkpoint (the job store's reference), on the checkpoint thread.
  CheckpointOptions checkpoints;
  Checkpoints::OnWritten on_checkpoint;
  // The post-stages' variants and limits (stages/post/post_process.hpp): interpolate and upscale
  // run on the "post" pool (made with post_threads threads when the executor has none), or on a
  // device lease for a model-backed variant.
  PostOptions post;
  std::size_t post_threads = 1;
  // Finished base renders' decoded clips (stages/exec/base_frames.hpp): a job that differs from
  // one only in interpolate/upscale skips preprocess, denoise and decode. Off by default.
  BaseFramesOptions base_frames;
  // Live streams (stages/media/live_broadcast.hpp; optional, outlives the set): a job whose
  // stream a client opened before its encode started also writes its mp4 as fragmented MP4 to
  // it (stages/media/fragment_tap.hpp), completed once the file is in place, failed if the encode
  // fails. Jobs nobody watches are encoded exactly as without.
  LiveStreams* live = nullptr;
  // Whether this machine's CPU computes bf16 natively (AVX-512 BF16 or AMX; unset: asked of the
  // CPU, stages/model/torch_devices.hpp). A package that defaults to bf16 renders the jobs that
  // name no precision in its own float dtype on a set of CPU devices without it: emulated bf16
  // is several times slower than float32 there.
  std::optional<bool> cpu_bf16_native;
};

// What a finished job produced (valid once the job is done).
struct RenderOutput {
  JobSpec spec;
  std::filesystem::path output;
  bool text_cache_hit = false;
  std::string device;
};

class Family;  // stages/family.hpp (LibTorch)

// The model packages of a ModelSet, loaded (each family made) before the set is built, so that
// a Runtime can measure them (stages/tune_probe.hpp) before it chooses its devices' threads.
struct LoadedModels {
  std::vector<std::pair<std::string, std::shared_ptr<Family>>> models;  // (name, family), the first the default
};
// Loads each package and its family (the errors of the ModelSet constructor).
LoadedModels load_models(const std::vector<std::pair<std::string, std::filesystem::path>>& models,
                         const ModelSetOptions& options);

class ModelSet {
 public:
  // `models`: (name, package directory) pairs, the first the default. Loads each package and
  // its family (Error(invalid_argument / not_found) naming what is wrong). The executor must
  // hold a "device:<id>" pool per device and a "codec" pool.
  ModelSet(std::vector<std::pair<std::string, std::filesystem::path>> models, Executor& executor, DevicePool& devices,
           ModelSetOptions options);
  // The same over models already loaded (load_models).
  ModelSet(LoadedModels models, Executor& executor, DevicePool& devices, ModelSetOptions options);
  ~ModelSet();
  ModelSet(const ModelSet&) = delete;
  ModelSet& operator=(const ModelSet&) = delete;

  std::vector<std::string> model_names() const;
  // Whether jobs of model `name` (empty: the default) get previews: preview_every > 0 and its
  // package has preview factors.
  bool previews(const std::string& name = {}) const;
  // The package of model `name` (empty: the default); Error(invalid_argument) if unknown.
  const ModelPackage& package(const std::string& name = {}) const;
  // Parses a job spec against its model's defaults and limits, and its post-stage settings
  // against the set's (an upscale past post.max_side) (Error(invalid_argument)).
  JobSpec validate(const boost::json::value& spec) const;
  // validate(), then the job's image files read, decoded and hashed into `spec` (the
  // "*_sha256" fields; stages/image_admission.hpp): what a Runtime runs before it accepts a
  // job, so a bad image is refused (invalid_argument naming the field) before anything is
  // queued or written. Blocks on the files' reads and decodes.
  JobSpec admit(boost::json::value& spec) const;
  // The identity of what makes a parsed spec's video, for content keys: the model it runs on
  // (ModelPackage::id) and, when it asks for them, the post-stage variants (PostProcessor::identity).
  std::string model_id(const JobSpec& spec) const;

  // preprocess, denoise, decode, interpolate, upscale, encode; a job skips the post-stages it
  // does not ask for (StageSpec::applies), so it runs as it would without them.
  std::vector<StageSpec> stages() const;
  // How many jobs above a priority wait to enter denoise (e.g. Pipeline::waiting_above on the
  // "denoise" stage): running denoise groups preempt lower-priority rows for them
  // (stages/batcher.hpp). Thread-safe; without it nothing is preempted.
  void set_waiting_probe(std::function<std::size_t(int priority)> probe) const;
  // The probe over `pipeline`'s denoise queue, built from stages(); `pipeline` outlives the set's jobs.
  void preempt_for(const Pipeline& pipeline) const;
  // The batch size of groups formed from now on (Batcher::set_max_batch: running groups keep
  // theirs); at most options.max_batch_limit. Thread-safe.
  void set_max_batch(std::size_t max_batch) const;
  // Calls every model's modules on `device` twice before jobs arrive (Family::warm_up).
  void warm_up(const std::string& device) const;

  RenderOutput result(const Job& job) const;  // Error(internal) if the job never prepared
  // > 0: the denoising step a checkpoint brought the job back to (0 too if it never prepared).
  int resumed_from(const Job& job) const;
  // The job with content key `key_hex` ended for good: its step checkpoint is removed.
  void drop_checkpoint(const std::string& key_hex) const;
  std::uint64_t checkpoint_bytes() const;  // on disk now (0 when off)
  CacheStats text_cache_stats() const;        // summed over the models
  CacheStats lora_cache_stats() const;        // merged LoRA variants, summed (Family::lora_cache_stats)
  CacheStats base_frames_stats() const;       // the reused base renders (cost: bytes)
  // Groups run so far by size, for "preprocess", "denoise" or "decode".
  std::map<std::size_t, std::uint64_t> group_sizes(std::string_view stage) const;
  // Every group run so far: its key (stage|family|package|...) and size, in order (tests).
  std::vector<std::pair<std::string, std::size_t>> group_log() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace vgen
