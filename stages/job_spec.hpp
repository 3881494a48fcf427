// JobSpec: what one text-to-video job asks for, parsed and validated from JSON (CLI flags,
// JSONL lines and HTTP bodies all become this). Every error names the field, e.g.
// "width: must be a multiple of 16 (got 250)", and is Error(invalid_argument).
//
// Defaults and limits come from the model package's manifest (SpecLimits), so a model that
// supports other sizes or frame counts needs no code change.
// Thread-safety: plain values; the functions are pure.
#pragma once

#include "runtime/content_key.hpp"

#include <boost/json/value.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

// One LoRA a job asks for (stages/model/lora.hpp): a file `name`.safetensors under the configured
// lora_dir, merged at `scale`. sha256 is the file's, filled in by the family's validate (it
// is part of the job's content key, not of its JSON).
struct LoraRef {
  std::string name;
  double scale = 1.0;
  std::string sha256;
  bool operator==(const LoraRef&) const = default;
};

struct JobSpec {
  std::string prompt;
  std::string negative_prompt;
  int width = 256, height = 256;
  int frames = 17;
  int steps = 20;
  double guidance = 5.0;            // classifier-free guidance is used when > 1
  std::uint64_t seed = 0;
  double fps = 16.0;
  std::string format = "mp4";
  std::string scheduler;            // empty: the package's scheduler
  std::string name;                 // output file stem; empty: derived from the job id
  std::string model;                // which of the runtime's models; empty: its default one
  // Image-to-video inputs: absolute paths of PNG/JPEG/WebP files (the CLI, batch files and HTTP
  // uploads resolve them), empty for none. The *_sha256 fields hold the SHA-256 of the file's
  // bytes, filled at admission (ModelSet::admit): the content key depends on the bytes, never
  // on the path, and a resumed job checks that its file still holds them.
  std::string image, last_image;
  std::string image_sha256, last_image_sha256;
  // Video-to-video input (issue 34): an absolute path of a video file, resolved and admitted as
  // the images are (video_sha256 filled at admission, stages/media/video_input.hpp). strength
  // is diffusers' WanVideoToVideoPipeline's: the share of the schedule that runs from the
  // noised input video (1: all of it, the input only shapes the noise; near 0: the input
  // returned). Part of the content key only when a video is given.
  std::string video, video_sha256;
  double strength = 0.8;
  // Extending a finished clip (issue 34 item 4): with `video`, the job renders a new segment
  // from an image-to-video package conditioned on the video's last frame (taken as the job's
  // image) and its output is the video's frames followed by the segment less its first frame
  // (stages/media/clip_extension.hpp). The video then is not the model's input: the package
  // needs to take an image, not a video; `image` and `strength` are refused with it.
  // A package that extends by latents (SpecLimits::extend_overlap = N > 0) instead conditions the
  // segment on the clip's last N frames, and the output drops the segment's first N frames.
  bool extend = false;
  // An extend job of a package that extends by latents: the SHA-256 of the kept latents file of
  // its video (stages/exec/kept_latents.hpp) that admission found, whose overlap latents the
  // job then takes instead of encoding the video's frames again; empty when there was none.
  // Part of the content key only when set (the latents change the result's bytes slightly), so
  // the same spec with and without kept latents never shares a result.
  std::string video_latents_sha256;
  // Wan VACE inputs (issue 34 item 3; a package whose manifest "inputs" names them), beside the
  // control video in `video` (then not a video-to-video start: no strength). mask_video: an
  // absolute path of a video admitted as `video` is (mask_video_sha256 at admission), of the
  // control video's frame count and size: white where the control video is to be regenerated
  // (diffusers' `mask`); needs `video`. reference_images: absolute image paths (at most 4),
  // admitted as `image` is (reference_images_sha256, one per path, at admission).
  // conditioning_scale: diffusers' `conditioning_scale`, the weight of the control hints in
  // every VACE layer, in [0, 10]; part of the content key only when not 1.
  std::string mask_video, mask_video_sha256;
  std::vector<std::string> reference_images, reference_images_sha256;
  double conditioning_scale = 1.0;
  std::vector<LoraRef> loras;       // "loras": [{"name", "scale"}], in order; at most 8
  double step_cache = 0.0;          // step-cache threshold (stages/exec/step_cache.hpp); 0: off
  // Scheduling, not content: higher first in every queue, and it may preempt lower-priority
  // denoising (stages/exec/batcher.hpp). In [-Job::kMaxPriority, Job::kMaxPriority] = [-100, 100].
  // Not part of the content key: the same video at any priority.
  int priority = 0;
  double shift = 0.0;               // the scheduler's flow shift; 0: the package's scheduler config's
  // Which weight variant of the denoiser runs (issue 24): "float32" (or the package's own float
  // dtype) or "int8" (dynamically quantized Linears). Empty before validation: the package's
  // default (SpecLimits::precisions, JobSpec defaults). Jobs of different precisions never share
  // a denoiser call; a quantized precision is part of the content key (another video).
  std::string precision;
  // Post-stages after decode (stages/post/): 1 is off, else 2 or 4. interpolate multiplies the
  // frame rate ((frames - 1) x factor + 1 frames at fps x factor), upscale both sides (the
  // upscaled size is checked against the runtime's post.max_side by ModelSet::validate). Both
  // are part of the content key only when on: a job without them keeps the key it had before.
  int interpolate = 1;
  int upscale = 1;
  // The finished file's shape, filled at admission (set_output_shape; not part of the content
  // key, which the fields above make): the clip after an extension's join and the post-stages.
  // output_frames 0: unknown (an extend whose video's frame count was not known).
  int output_frames = 0, output_width = 0, output_height = 0;
  double output_fps = 0.0;
};

// Whether a model takes an input (manifest "inputs": {"image": ..., "last_image": ...}).
enum class InputUse { none, optional, required };
// "none" | "optional" | "required"; anything else is Error(invalid_argument) naming `field`.
InputUse parse_input_use(std::string_view text, std::string_view field);

struct SpecLimits {
  int size_multiple = 16;
  int min_size = 16, max_size = 1920;
  int frames_step = 4;              // frames = frames_step * k + 1
  int min_frames = 1, max_frames = 257;
  int max_steps = 1000;
  double max_guidance = 50.0;
  // Below 1 fps an encoder's time base (1/fps as a rational, stages/media/encode.cpp) degenerates
  // and a frame would last minutes; 240 is what VideoFrames accepts.
  double min_fps = 1.0, max_fps = 240.0;
  std::size_t max_prompt_bytes = 4096;
  std::uint64_t max_seed = (std::uint64_t{1} << 63) - 1;
  std::vector<std::string> formats = {"mp4", "webm", "gif", "png"};
  std::vector<std::string> schedulers;  // empty: any name (checked later by the registry)
  double max_step_cache = 1.0;          // step_cache in [0, max_step_cache]
  double max_shift = 100.0;             // shift in [0, max_shift] (0: the scheduler config's)
  InputUse image = InputUse::none;       // a text-to-video package takes no image
  InputUse last_image = InputUse::none;  // never required: it needs `image` as well
  InputUse video = InputUse::none;       // manifest "inputs": {"video": ...} (video-to-video)
  // manifest "inputs": {"mask_video": ..., "reference_images": ...} (Wan VACE); a package that
  // takes either also takes conditioning_scale.
  InputUse mask_video = InputUse::none;
  InputUse reference_images = InputUse::none;
  // Extension by latents (issue 34 item 4; manifest "extension": {"overlap_frames": N}, a
  // diffusion-forcing package): an extend job's segment starts with the clip's last N frames,
  // whose latents condition it, instead of an image-to-video job on its last frame. 0: none.
  int extend_overlap = 0;
  // The precisions the package carries (its base variant first); empty: only its own, and a job
  // may not name one. A job's "precision" outside the list is refused naming the field.
  std::vector<std::string> precisions;
  std::string model_name;                // in messages ("image: required by model 'x'"); empty: "this model"
};

// Fields absent from `json` keep the value they have in `defaults`. Unknown fields, wrong
// types and out-of-range values are rejected, naming the field.
JobSpec parse_job_spec(const boost::json::value& json, const JobSpec& defaults, const SpecLimits& limits);
// Checks the whole spec against the limits (parse_job_spec calls it). Limits that would make a
// check meaningless (a multiple or frame step below 1) are Error(internal): they come from
// code or from a manifest that load_model_package already checked.
void validate_job_spec(const JobSpec& spec, const SpecLimits& limits);
// Whether a precision name is a quantized variant ("int8"), as opposed to a float dtype: a float
// precision is the package's own dtype (its id says which), a quantized one changes the video.
bool is_quantized_precision(std::string_view precision);
// Whether the job starts from a picture: its own `image`, or an extend job's video's last frame.
// Families ask this, not image.empty(), so an extend job runs as the image job it is.
inline bool has_first_frame(const JobSpec& spec) { return !spec.image.empty() || spec.extend; }

// Fills the output_* fields from the rest: an extend job's output is its video's `clip_frames`
// followed by the segment less the `overlap` frames the join drops (at least 1; 0 clip frames:
// output_frames stays unknown); interpolate gives (frames - 1) x factor + 1 frames at fps x factor; upscale
// multiplies both sides.
void set_output_shape(JobSpec& spec, std::int64_t clip_frames, int overlap);

// Every field, in a fixed form: the input of the job's content key.
boost::json::object to_json(const JobSpec& spec);
// What identifies a job's video: every field but "name", and the model (ModelPackage::id()).
// Two jobs with the same key produce the same bytes; vgen writes it into each output
// ("vgen:<hex>" comment tag) and keys its result cache with it.
ContentKey job_content_key(const std::string& model_id, const JobSpec& spec);
// The model id a job's content key names for a package whose own weights are `base_precision`:
// `package_id`, plus "|precision:<p>" when the job runs a float variant other than the base (a
// float32 package's bfloat16 denoiser renders another video, and job_content_key keeps only a
// quantized precision). Jobs at the base precision keep the keys they had before.
std::string precision_model_id(const std::string& package_id, const std::string& base_precision, const JobSpec& spec);

// A file stem that cannot escape its directory: [A-Za-z0-9._-], no leading dot, ≤ 100 bytes.
// Throws Error(invalid_argument) naming `field` for "", ".", "..", '/' or other characters.
std::string checked_output_name(const std::string& name, const char* field = "name");

}  // namespace vgen
