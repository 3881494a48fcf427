// Post-stages: what runs on a decoded clip between decode and encode when a job asks for it
// (JobSpec::interpolate, JobSpec::upscale). A variant is a PostProcessor chosen by name from
// post_processors(), as schedulers, encoders and families are chosen from theirs:
//   minterpolate  libavfilter's motion-compensated interpolation (stages/post/libav_post.hpp)
//   lanczos       libavfilter's scale with the lanczos kernel (stages/post/libav_post.hpp)
//   realesrgan    an RRDBNet upscaler exported from a checkpoint (stages/post/rrdb_upscaler.hpp)
//   rife          RIFE's IFNet interpolator exported from a checkpoint (stages/post/rife_interpolator.hpp)
// The libavfilter ones need no model and are the fallback; they are of lower quality than a
// model (minterpolate smears fast motion, lanczos invents no detail).
//
// What a processor makes (the contract every variant keeps, checked by check_post_output):
//   interpolate x f: (count - 1) x f + 1 frames at fps x f, the inputs at every f-th position
//                    (a gap between two frames gets f - 1 new ones; nothing after the last)
//   upscale x f:     width x f by height x f, the same count and fps
// No LibTorch here (api/ reads PostOptions through the config).
// Ownership: processors are immutable once made and shared (shared_ptr<const>).
// Thread-safety: the registry and every processor's run() may be called from any thread.
// Blocking: run() is CPU or device work that blocks its thread and cannot be cancelled; the
// stage calls it on a worker pool, never on an io thread.
#pragma once

#include "runtime/registry.hpp"
#include "stages/job_spec.hpp"
#include "stages/media/frames.hpp"

#include <boost/json/object.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace vgen {

enum class PostKind { interpolate, upscale };
std::string_view to_string(PostKind kind);  // "interpolate" | "upscale": the stages' names

// The runtime's post-stage settings (config section "post").
struct PostOptions {
  // The longest side an upscaled frame may have: a job past it is refused naming "upscale".
  int max_side = 4096;
  // A registered interpolate variant; empty: "rife" with an interpolate_model, else "minterpolate".
  std::string interpolator;
  // A post package written by `python -m vgen_export.post --rife FILE` (rife).
  std::filesystem::path interpolate_model;
  // Model interpolation runs this many (frame pair, time) items per call of the model.
  int interpolate_batch = 4;
  // A registered upscale variant; empty: "realesrgan" with an upscale_model, else "lanczos".
  std::string upscaler;
  // A post package written by `python -m vgen_export.post --realesrgan FILE` (realesrgan).
  std::filesystem::path upscale_model;
  // Model upscaling works in tiles of this many input pixels per side (0: whole frames), each
  // with `tile_overlap` pixels of context on every side, so that a large frame fits in memory.
  int tile = 256;
  int tile_overlap = 16;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual PostKind kind() const = 0;
  virtual std::string name() const = 0;
  // What decides the frames this variant makes, for the job's content key (result cache,
  // rerun rule): its name, and for a model its weights' hash and the settings that change
  // pixels. Two processors with the same identity make the same frames from the same clip.
  virtual std::string identity() const { return name(); }
  // Whether run() needs a compute device (a model) and so a device lease; otherwise it runs on
  // the host's "post" worker pool.
  virtual bool uses_device() const { return false; }
  // Why this variant cannot run here (e.g. a library it loads on first use is missing); empty
  // when it can. ModelSet::validate refuses a job that needs an unavailable variant.
  virtual std::string unavailable() const { return {}; }
  // The clip processed by `factor` (2 or 4) as the contract above says, on `device` ("cpu:0",
  // "cuda:1"; ignored by host variants). Error(invalid_argument) for a bad factor or clip.
  virtual VideoFrames run(const VideoFrames& in, int factor, const std::string& device) const = 0;
};

using PostFactory = std::function<std::shared_ptr<const PostProcessor>(const PostOptions&)>;
// The variants by name. The built-ins live in other libraries and are added by their own
// idempotent calls (register_libav_post, register_rrdb_upscaler, register_rife_interpolator),
// which ModelSet makes.
Registry<PostFactory>& post_processors();

// The processor of `kind` the options name (Error(invalid_argument) for an unknown name, a
// variant of the other kind, or a model that does not load).
std::shared_ptr<const PostProcessor> make_post_processor(PostKind kind, const PostOptions& options);

// A job's post settings against the runtime's: the upscaled size within max_side (refused as
// Error(invalid_argument) "upscale: ..."). Cheap; ModelSet::validate calls it.
void check_post_job(const JobSpec& spec, const PostOptions& options);

// What `out` must be after processing `in` by `factor` (the contract above); Error(internal)
// naming the variant when it is not.
void check_post_output(const PostProcessor& p, const VideoFrames& in, int factor, const VideoFrames& out);

// A model-backed variant's package, written by `python -m vgen_export.post`: DIR/manifest.json
// with "kind": "post", the variant's "variant" and "architecture", and "module" (a file name in
// DIR that exists). The variant reads its own further fields from `fields`.
struct PostManifest {
  std::filesystem::path file;    // DIR/manifest.json, for messages
  boost::json::object fields;    // the whole manifest
  std::filesystem::path module;  // DIR/<module>
  // The string field `key`; Error(invalid_argument) naming the file and key when missing or not a string.
  std::string text(const char* key) const;
  // Error(invalid_argument) "post package <file>: <what>".
  [[noreturn]] void bad(const std::string& what) const;
  // Error(not_found) naming the module when it is missing: called after the variant's own
  // fields are checked, so a wrong field is named before a missing file.
  void require_module() const;
};
// Error(not_found) naming the file and `export_flag` (e.g. "--rife") when DIR has no manifest;
// Error(invalid_argument) naming the field for any other mismatch.
PostManifest read_post_manifest(const std::filesystem::path& dir, const std::string& variant, const std::string& architecture,
                                const std::string& export_flag);

}  // namespace vgen
