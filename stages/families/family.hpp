// vgen::Family: what a model family (Wan 2.1 text-to-video, and the next ones) implements so
// that the generic batcher, denoise loop and stages (stages/exec/batcher.hpp,
// stages/exec/denoise_loop.hpp, stages/exec/model_set.hpp) can run it. A family is a folder
// (stages/families/wan/, ...) whose CMakeLists.txt calls vgen_family() and whose source defines
// register_<component>() (cmake/family.cmake); the manifest's `family` picks it from families().
//
// A job's path through a family:
//   validate(spec)              the job spec against the package's defaults and limits
//   create_job(spec)            the job's state object (a FamilyJob subclass)
//   prepare(device, group)      tokenize, encode text and any conditioning, draw the noise;
//                               jobs with the same prepare_key() share one call
//   make_scheduler(job)         the job's scheduler, set to its steps
//   begin_denoise(group, dev)   per-group set-up (e.g. the text context at one row count)
//   predict(call)               one denoiser call for the group's live jobs at a step, guidance
//                               included; jobs share a call only with the same denoise_key()
//   decode(device, group)       latents -> frames in [0, 1]; groups by decode_key()
//   warm_up(device)             call every module twice at the smallest size (first calls slow)
// Every key starts with the family's name and the package id (key_prefix()), so jobs of
// different families or packages never share a group.
//
// Threads: prepare, predict, decode and warm_up run on the device's compute thread (a worker
// pool thread) and may block; create_job, the keys, make_scheduler and begin_denoise run on
// an io thread and must be cheap. A Family is shared by all jobs of its package; calls for
// different groups may run concurrently on different devices, so its own state (caches) must
// be thread-safe. Nothing here is cancellable: the loop checks cancellation between calls.
// This header includes LibTorch: api/ never includes it (it sees stages/exec/model_set.hpp).
#pragma once

#include "runtime/job.hpp"
#include "runtime/registry.hpp"
#include "runtime/ttl_cache.hpp"
#include "stages/families/family_options.hpp"
#include "stages/job_spec.hpp"
#include "stages/model/model_package.hpp"
#include "stages/schedulers/scheduler.hpp"

#include <ATen/core/Tensor.h>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace vgen {

// A job's denoising state between steps: everything the step loop needs to carry a job on
// from `step`, in this group or another, in this process or after a restart (checkpoints,
// stages/exec/checkpoint.hpp): the step index, the job's latents and its row of the group
// scheduler's multistep history (stages/schedulers/scheduler.hpp, row-wise).
struct StepState {
  int step = 0;        // the next step to run; == steps once the loop is done
  at::Tensor latents;  // [1, C, F', H', W'] float32: the noise before step 0, then the sample
  SchedulerRowState scheduler;  // empty before step 0 (and for memoryless schedulers)
  int resumed_from = 0;         // > 0: the step a checkpoint brought this job back to
};

// One job's state inside a family. Families derive from it for their own fields; the generic
// stages use only these. Shared (std::shared_ptr) by the job's payload and any group it is
// in, so a job that ends while its group still computes frees nothing the group uses.
struct VideoFrames;  // stages/media/frames.hpp
struct AudioTrack;   // stages/media/audio_track.hpp
struct RgbImage;     // stages/media/image_input.hpp

struct FamilyJob {
  virtual ~FamilyJob() = default;
  JobSpec spec;
  StepState state;
  at::Tensor frames;  // [F, H, W, 3] float32 in [0, 1] after decode
  // After a post-stage (stages/post/): the processed clip, which encode writes instead of
  // `frames` (then released). Null for a job without post-stages.
  std::shared_ptr<const VideoFrames> post_frames;
  // The job's sound after decode, for a family with sound (null for a silent one); encode
  // muxes it beside the frames.
  std::shared_ptr<const AudioTrack> audio;
  // An extend job's first frame (JobSpec::extend): its video's last frame at the job's size,
  // set by the preprocess stage before prepare (stages/media/clip_extension.hpp). Families take
  // the picture through job_first_frame (family_kit.hpp), which prefers it to spec.image.
  std::shared_ptr<const RgbImage> first_frame;
  // An extend job's video's own final latents [1, C, F', H', W'] when the video is a finished
  // job's output of the same package (stages/exec/result_latents.hpp), set by the preprocess
  // stage; undefined otherwise. A family that extends by latents (SpecLimits::extend_overlap)
  // takes the overlap's latents from them instead of encoding the decoded frames again.
  at::Tensor video_latents;
  // When decode made `audio` (a family with sound sets both; jobs decoded in one call may share
  // one interval). The batcher reports it as the stage "audio_decode", a part of "decode":
  // vgen_stage_duration_seconds{stage="audio_decode"}, a trace span on the device's track and
  // the job's stage_seconds.
  using clock_point = std::chrono::steady_clock::time_point;
  clock_point audio_start{}, audio_end{};
  std::filesystem::path output;
  // Where this job's frames go while its clip decodes, chunk by chunk: set by the decode stage
  // (stages/exec/streamed_encodes.hpp) only once a streamed encode runs for the job (a watched
  // live stream), cleared after the decode; empty for every other job. A family that decodes
  // in time chunks (stages/exec/chunked_decode.hpp: Wan) hands it each chunk of the job's
  // frames, [f, H, W, 3] float32 in [0, 1], in order, on the compute thread; one that decodes
  // whole ignores it (the stage hands the clip over after the decode). It may throw: the family
  // then stops calling it, and that job's streamed encode ends short (its batch-mates go on).
  std::function<void(const at::Tensor& frames)> on_frames;
  bool text_cache_hit = false;
  std::string device;  // the device the last stage ran on
  // Optional observer (tests, tools), called on the compute thread after each step.
  std::function<void(int step, const at::Tensor& latents)> on_step;
};

// One denoiser call: the live jobs of a group and their stacked model inputs at one step.
struct PredictCall {
  const std::vector<FamilyJob*>& jobs;  // live members, in row order of x
  const at::Tensor& x;                  // [jobs, ...] the scheduler-scaled latents
  const at::Tensor& timestep;           // [jobs]: each row's own scheduler timestep (rows may differ)
  const std::string& device;
};

// The call's timesteps as float32 [jobs]: one per row, or one for all rows given as a scalar
// (callers that step a whole group together). Error(internal) for any other count.
at::Tensor row_timesteps(const PredictCall& call);

// A manifest's scheduler.config as scheduler parameters: numbers as doubles, booleans, strings,
// arrays of numbers; anything else (null, objects) is present as std::monostate.
SchedulerParams scheduler_params_of(const boost::json::object& config);

class Family {
 public:
  virtual ~Family() = default;

  virtual const ModelPackage& package() const = 0;
  // The family's name (the manifest's `family`) and the package id: the start of every key.
  std::string key_prefix() const;

  virtual JobSpec validate(const boost::json::value& spec) const = 0;
  virtual std::shared_ptr<FamilyJob> create_job(JobSpec spec) const = 0;

  virtual std::string prepare_key(const FamilyJob& job) const;  // default: key_prefix()
  virtual void prepare(const std::string& device, const std::vector<FamilyJob*>& jobs) = 0;

  virtual std::unique_ptr<Scheduler> make_scheduler(const FamilyJob& job) const = 0;
  // What must match for jobs to share denoiser calls (shape, steps, scheduler, guidance...).
  virtual std::string denoise_key(const FamilyJob& job, const Scheduler& scheduler) const = 0;
  virtual void begin_denoise(const std::vector<FamilyJob*>& group, const std::string& device);
  // The guided prediction [jobs, ...] on the CPU, float32 or the model's dtype.
  virtual at::Tensor predict(const PredictCall& call) = 0;

  virtual std::string decode_key(const FamilyJob& job) const;  // default: prefix + latent shape
  virtual void decode(const std::string& device, const std::vector<FamilyJob*>& jobs) = 0;

  virtual void warm_up(const std::string& device) = 0;
  virtual CacheStats text_cache_stats() const { return {}; }
  // Merged LoRA variants (stages/model/lora_variants.hpp) as cache stats: hits, misses = merges,
  // evictions, entries, cost = their bytes. None for a family without LoRAs.
  virtual CacheStats lora_cache_stats() const { return {}; }
};

using FamilyFactory = std::function<std::shared_ptr<Family>(ModelPackage package, const FamilyOptions& options)>;

// The families by manifest name: the built-ins (once register_builtin_families() has run;
// ModelSet runs it) and any a program or test adds. An unknown name is
// Error(invalid_argument) "unknown model family 'x' (known: ...)".
Registry<FamilyFactory>& families();
// Adds the families vgen ships; idempotent, thread-safe. Generated by the build from the
// families' folders (cmake/family.cmake): each family's source defines its own
// `void register_<component>()`, which adds its manifest name(s) here.
void register_builtin_families();

// Loads the package and makes its family (Error(invalid_argument) naming what is wrong).
std::shared_ptr<Family> load_family(const std::filesystem::path& package_dir, const FamilyOptions& options = {});

// The FamilyJob in a job's payload (std::shared_ptr<FamilyJob>); Error(internal) if none.
std::shared_ptr<FamilyJob> family_job(Job& job);
const FamilyJob* find_family_job(const Job& job);  // nullptr if none

}  // namespace vgen
