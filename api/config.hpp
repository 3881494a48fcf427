// RuntimeConfig: everything that shapes a vgen::Runtime (model, devices, stage concurrency,
// queues, caches, retry, encoder, service), read from a JSON config file (configs/*.json).
//
// Strict: an unknown key, a wrong type or an out-of-range value is Error(invalid_argument)
// naming the key's path, e.g. "config configs/x.json: stages.denoise.workers: must be >= 1
// (got 0)". JSON comments (// and /* */) are allowed. Relative paths in a file ("model",
// "output_dir") are relative to the file's directory.
// Command-line flags override the file: apps load the file first and then assign the flags
// they were given (see apply_overrides).
// The settings of a component are that component's own options struct, held whole (batching:
// the Batcher's, encoder: the encoder's, ...): the reader below fills them and the Runtime
// hands them down untouched, so a new knob is an edit to its component and to this reader.
// Environment variables are not read here nor in the Runtime: apps call read_environment.
// Thread-safety: plain values; the functions are pure apart from reading the file.
#pragma once

#include "api/fleet/fleet_queue.hpp"
#include "api/webhook_options.hpp"
#include "runtime/fault_injector.hpp"
#include "stages/exec/batching_options.hpp"
#include "stages/exec/checkpoint.hpp"
#include "stages/exec/stage_options.hpp"
#include "stages/families/family_options.hpp"
#include "stages/model/model_backend_options.hpp"
#include "stages/media/encode.hpp"
#include "stages/media/image_input.hpp"
#include "stages/media/video_input.hpp"
#include "stages/exec/base_frames.hpp"
#include "stages/post/post_process.hpp"

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vgen {

struct RuntimeConfig {
  std::filesystem::path model;  // empty: the bundled default model (default_model_dir())
  // More models served beside it, by name: a job picks one with its "model" field (the
  // default model answers to its directory's name or no "model" at all). Any family each.
  std::vector<std::pair<std::string, std::filesystem::path>> models;
  std::string devices = "cpu";  // parse_device_list syntax: cpu | cpu,cpu | cuda:0,cuda:1 | auto
  std::string device_policy = "least_loaded";
  std::filesystem::path output_dir = ".";

  // "auto" in a config file (and the default) for max_batch, threads.per_device and
  // threads.intra_op: the Runtime measures the model and chooses (runtime/auto_tune.hpp).
  static constexpr std::size_t kAuto = 0;

  std::size_t io_threads = 1;
  // Compute worker threads (and CPU leases) per device; kAuto: tuned.
  std::size_t threads_per_device = kAuto;
  // Leases per CUDA device ("threads.per_gpu", 1..8): each one a compute thread of its own
  // (all queueing on the device's one CUDA stream, api/compute_devices.hpp), so that one job's
  // thread queues kernels while another's is on the host. A number, not "auto": the tuner
  // measures CPU splits, not GPU overlap.
  std::size_t threads_per_gpu = 1;
  std::size_t codec_threads = 1;       // encode worker threads
  // LibTorch threads per compute thread; kAuto: tuned with per_device (their product the
  // cores). read_environment sets it from OMP_NUM_THREADS when it is kAuto.
  std::size_t intra_op_threads = kAuto;
  std::size_t spin_us = 50;            // idle io/compute threads poll this long before blocking

  // Per stage of the model set, by name ("stages.<name>": the keys of default_stage_options()).
  StageOptionsMap stages = default_stage_options();

  // Cross-job batching (stages/exec/batching_options.hpp), config keys "batching.max_batch",
  // "wait_ms", "join_running". max_batch kAuto: tuned (once the Runtime is built, config()
  // holds the number chosen).
  BatchingOptions batching{.max_batch = kAuto};

  // The auto-tuner (runtime/auto_tune.hpp), for the settings left at kAuto. Config key "tune":
  // {"budget_s": N, "dir": "...", "max_batch": N}. The probe measures the default model at
  // `spec` (a job spec; empty: the package's defaults) on the first device, at most about
  // budget_s seconds, and caches the choice in `dir` (empty: $XDG_CACHE_HOME/vgen/tune).
  // `one_job` (`vgen render`): the fastest split for a single job, batch 1.
  // `first_wait_s`: how long the first job waits for the probe on a fresh cache (seconds; 0:
  // not at all): no measurement starts once it is spent, but the first one is always made
  // (it includes the model's first calls) whatever it costs. The search goes on between jobs and the runtime switches its batch when it
  // knows better (api/runtime_tuning.hpp).
  struct Tune {
    double budget_s = 30;
    double first_wait_s = 2;
    std::filesystem::path dir;
    std::size_t max_batch = 8;  // the largest batch probed
    boost::json::object spec;   // set by apps (not a config key): the shape to tune for
    bool one_job = false;       // set by `vgen render` (not a config key)
  } tune;

  // The model backends' settings (stages/model/model_backend_options.hpp), config key
  // "model_backend": {"torchscript_gpu_fusion": false, "torchscript_gpu_optimize": "auto"};
  // optimize false with fusion true is refused, naming both.
  ModelBackendOptions model_backend;

  // Before the runtime accepts jobs, call every module twice on each device at the package's
  // smallest size (LibTorch's profiling executor profiles a method's first call and optimises
  // its graph on the second: both are slow), so the first jobs run at steady-state speed.
  // Costs those calls at start-up. Config key "warmup".
  bool warmup = false;

  // Live streams (GET /v1/jobs/{id}/video?live=1, stages/media/live_broadcast.hpp): the bytes all
  // of them may hold together (each stream is also capped at 512 MiB). A stream that would pass
  // it is cut: its clients' responses end without their last chunk (an error) and a warning is
  // logged; the job's file is unaffected. Config key "live.max_total_mb" (default 2048).
  std::size_t live_max_total_bytes = std::size_t{2048} << 20;

  TextCacheOptions text_cache;  // config keys "cache.text.entries", "cache.text.ttl_s"
  // LoRA (stages/model/lora.hpp): jobs' "loras" name files under loras.dir (empty: LoRAs
  // refused); merged variants are kept within loras.cache_bytes per model (0: merge for every
  // group). Config keys "lora_dir" and "cache.loras.mb" (whole MiB).
  LoraOptions loras;
  std::size_t result_cache_entries = 1024;  // 0 disables the result cache
  std::chrono::seconds result_cache_ttl{3600};
  // Finished base renders' decoded clips (stages/exec/base_frames.hpp), for jobs that differ
  // only in interpolate/upscale: config keys "cache.base_frames.mb" (0: off) and
  // "cache.base_frames.ttl_s". Used only with the result cache on (a Runtime that renders
  // every job, as `vgen render` does, keeps none).
  BaseFramesOptions base_frames{.max_bytes = std::size_t{1024} << 20, .ttl = std::chrono::seconds(3600)};

  int retry_attempts = 3;  // total attempts per stage (1 = no retry)
  std::chrono::milliseconds retry_initial_backoff{200};
  std::chrono::milliseconds retry_max_backoff{5000};
  double retry_multiplier = 2.0;

  // The encoder's (stages/media/encode.hpp), config keys "encoder.*"; format and comment are
  // each job's.
  EncodeOptions encoder;

  // Durable job journal (SQLite, api/journal.hpp); empty: none. `vgen batch` and `vgen serve`
  // default to <output_dir>/.vgen-journal.db. With resume_journal a new Runtime resubmits the
  // jobs a crashed one left unfinished; without, it marks them interrupted.
  std::filesystem::path journal;
  std::string job_store = "sqlite";  // the job store kind at `journal` (runtime/job_store.hpp job_stores())
  // Hold runtime/output_lock on output_dir (and on a journal kept elsewhere) for the Runtime's
  // life: a second Runtime, `vgen batch` or `vgen serve` on them is refused with overloaded.
  // `vgen batch` and `vgen serve` turn it on; embedders choose.
  bool exclusive_output = false;
  // Whether a job may replace a file another job finished under the same name (`vgen batch`
  // reruns do; `vgen serve` answers 409 instead). A job with the same content key always may.
  bool overwrite_outputs = true;
  // Poison jobs: a job whose compute started this many times in processes that then died
  // (attempts recorded in the job store, never ended) is failed with "crashed the worker N
  // times" on the next start instead of run again. 0: never.
  std::size_t quarantine_after = 2;
  // Queue aging (runtime/priority_channel.hpp): a waiting job gains one priority level per this
  // much waiting, so that nothing starves behind a stream of higher-priority work. Config key
  // "priority_aging_ms" (1 ms to 1 day; default kDefaultAging, 5 s).
  std::chrono::milliseconds priority_aging{5000};
  bool resume_journal = true;
  // Step checkpoints (stages/exec/checkpoint.hpp), with a journal only, in `dir` (empty here:
  // <output_dir>/.vgen-checkpoints): a denoising job's state every `every_steps` steps or
  // `every_seconds` seconds (0: not by that; both 0: off), for jobs of at least `min_steps`
  // steps; the folder stays under max_bytes (config key "checkpoints.max_mb", whole MiB). A
  // job resumed after a crash goes on from there.
  CheckpointOptions checkpoints;

  // Fault injection (off by default; runtime/fault_injector.hpp). read_environment replaces
  // it with $VGEN_FAULTS (JSON).
  FaultPlan faults;

  // When set, the Runtime records its timeline from start to shutdown and writes it here as
  // Chrome / Perfetto trace JSON (runtime/trace.hpp). `--trace FILE` on every command.
  std::filesystem::path trace_file;

  // Live previews while a job denoises (stages/preview.hpp): every this many steps and at the
  // last, for packages with preview factors; 0: none. Unset: none in the library, `vgen
  // render` and `vgen batch`; `vgen serve` uses kServePreviewEvery. Config key "preview_every".
  std::optional<int> preview_every;
  static constexpr int kServePreviewEvery = 2;

  // Kept in memory after a job ends, so that status and result queries still find it.
  std::chrono::seconds job_ttl{3600};

  // Image inputs of image-to-video jobs (stages/media/image_input.hpp): the largest file or
  // upload, and the most pixels, a job's image may have (config keys "images.max_bytes",
  // "images.max_pixels").
  ImageLimits images;
  // The video of a video-to-video job (stages/media/video_input.hpp): config keys
  // "videos.max_bytes", "videos.max_frames", "videos.max_pixels", "videos.max_seconds".
  VideoLimits videos;
  // The post-stages (stages/post/post_process.hpp): config section "post" with max_side (an
  // upscaled frame's longest side), interpolator, upscaler (variant names), interpolate_model
  // and upscale_model (post packages), interpolate_batch (pairs per model call), tile and
  // tile_overlap (model upscaling), threads (the "post" pool's).
  PostOptions post;
  std::size_t post_threads = 1;

  // The fleet (api/fleet_queue.hpp): `vgen serve --queue` / `vgen worker` over NATS JetStream.
  QueueConfig queue;

  // Webhooks (api/webhooks.hpp): job-end events signed and sent at least once to these
  // endpoints; config key "webhooks" (api/webhook_options.hpp). No endpoints: none sent.
  WebhookOptions webhooks;

  struct Service {
    std::string listen = "127.0.0.1:8080";
    std::size_t max_body_bytes = 64 * 1024;
    std::string token;  // non-empty: every request but /healthz needs "Authorization: Bearer <token>"
    std::size_t max_connections = 256;
  } service;
};

// Reads and validates a config file. Error(invalid_argument) names the file and the key path.
RuntimeConfig load_config(const std::filesystem::path& file);
// The text of a config file (what load_config reads), parsed and validated the same way;
// `origin` prefixes error messages and relative paths resolve against `base_dir`.
RuntimeConfig parse_config(std::string_view text, const std::string& origin, const std::filesystem::path& base_dir);
// Applies a parsed JSON object over `base` (the same rules; `origin` prefixes error messages
// and relative paths resolve against `base_dir`).
RuntimeConfig apply_config(RuntimeConfig base, const boost::json::object& json, const std::string& origin,
                           const std::filesystem::path& base_dir);
// The config as JSON (every key), e.g. for `vgen serve` to log what it runs with.
boost::json::object to_json(const RuntimeConfig& config);

// The process environment's say, applied by apps after the file and the flags (the Runtime
// reads no environment variable: an embedder or a test gets exactly the config it passes):
// $VGEN_FAULTS (a JSON fault plan) replaces config.faults (Error(invalid_argument) when it is
// not one); $VGEN_WEBHOOK_SECRET is the secret of webhook endpoints that have none; OMP_NUM_THREADS (an integer 1..1024, as LibTorch honours it) sets
// threads.intra_op when that is kAuto, so that the tuner keeps it fixed. Others are ignored.
void read_environment(RuntimeConfig& config);

// The bundled default model: $VGEN_MODEL if set, else the first existing of
// <exe>/../share/vgen/models/vgen-shapes (installed) and <source>/models/vgen-shapes (build tree).
// Error(not_found) naming the places looked at when there is none.
std::filesystem::path default_model_dir();

}  // namespace vgen
