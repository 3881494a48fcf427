// `vgen render PROMPT -o FILE [--model DIR] [--config FILE] [job flags] [--image PATH
// [--last-image PATH]] [--json]`: one job; `vgen extend VIDEO PROMPT -o FILE [...]`: the same job
// with "video" and "extend": true (the stages read the video's last frame and join the clips)
// through a vgen::Runtime. Progress on stderr (a bar on a terminal); the output path, or with
// --json the result object, on stdout. Exit codes come from the error kind (main.cpp).
#include "api/engine.hpp"
#include "apps/vgen/commands.hpp"
#include "apps/vgen/options.hpp"
#include "apps/vgen/progress.hpp"
#include "runtime/errors.hpp"
#include "stages/media/encode.hpp"

#include <boost/json.hpp>

#include <cerrno>
#include <cstring>
#include <iostream>

#include <unistd.h>

namespace vgen::cli {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

struct RenderFlags {
  std::string prompt, output;
  RuntimeFlags runtime;
  JobFlags job;
  std::string image, last_image;  // image-to-video inputs (paths; relative to the working directory)
  std::string video;              // video-to-video input (a path, relative to the working directory)
  std::optional<double> strength;  // video-to-video: how far the result departs from the video
  bool extend = false;            // `vgen extend`: `video` goes on from its last frame
  // Wan VACE: with `video` as the control video (paths relative to the working directory).
  std::string mask_video;
  std::vector<std::string> reference_images;
  std::optional<double> conditioning_scale;
  bool json = false;
};

// Output path -> (directory, stem, format). The format comes from --format or the extension.
// The path is checked here, before the model loads and the job renders: its directory must
// exist and be writable, and the output must not be a directory (or, for png frames, a file),
// since the rename at the end of the job would fail only after all the work.
void split_output(const RenderFlags& f, fs::path& dir, std::string& stem, std::string& format) {
  fs::path out(f.output);
  format = f.job.format.value_or("");
  const auto ext = out.extension().string();
  if (format.empty()) {
    if (ext == ".mp4" || ext == ".webm" || ext == ".gif") format = ext.substr(1);
    else throw_error(ErrorKind::invalid_argument, "output: cannot tell the format from '" + f.output +
                                                      "' (use .mp4, .webm, .gif, or --format png for a frame directory)");
  }
  dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  stem = (format == "png" || ext.empty()) ? out.filename().string() : out.stem().string();
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw_error(ErrorKind::invalid_argument, "output: directory '" + dir.string() + "' does not exist");
  if (!fs::is_directory(dir, ec)) throw_error(ErrorKind::invalid_argument, "output: '" + dir.string() + "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw_error(ErrorKind::invalid_argument, "output: directory '" + dir.string() + "' is not writable (" + std::strerror(errno) + ")");
  const auto target = dir / (stem + extension_for(format));  // what the job writes
  if (format != "png" && fs::is_directory(target, ec))
    throw_error(ErrorKind::invalid_argument, "output: '" + target.string() + "' is a directory; name a file");
  if (format == "png" && fs::exists(target, ec) && !fs::is_directory(target, ec))
    throw_error(ErrorKind::invalid_argument, "output: '" + target.string() + "' is a file; png frames need a directory");
}

int run_render(const RenderFlags& f) {
  fs::path dir;
  std::string stem, format;
  split_output(f, dir, stem, format);
  auto config = make_config(f.runtime);
  config.output_dir = dir;
  config.result_cache_entries = 0;  // one job: nothing to share
  json::object spec = job_fields(f.job);
  spec["prompt"] = f.prompt;
  spec["name"] = stem;
  spec["format"] = format;
  // The spec carries absolute paths (a journal may be read from another working directory).
  if (!f.image.empty()) spec["image"] = fs::absolute(f.image).lexically_normal().string();
  if (!f.last_image.empty()) spec["last_image"] = fs::absolute(f.last_image).lexically_normal().string();
  if (!f.video.empty()) spec["video"] = fs::absolute(f.video).lexically_normal().string();
  if (f.strength) spec["strength"] = *f.strength;  // the job spec checks the range and that a video is given
  if (f.extend) spec["extend"] = true;
  if (!f.mask_video.empty()) spec["mask_video"] = fs::absolute(f.mask_video).lexically_normal().string();
  if (!f.reference_images.empty()) {
    json::array refs;
    for (const auto& r : f.reference_images) refs.push_back(json::value(fs::absolute(r).lexically_normal().string()));
    spec["reference_images"] = std::move(refs);
  }
  if (f.conditioning_scale) spec["conditioning_scale"] = *f.conditioning_scale;  // range and package checked by the spec

  config.tune.one_job = true;  // "auto" threads: the fastest split for this one job
  config.tune.spec = spec;
  Runtime runtime(config);
  runtime.validate(spec);  // bad input fails here, before any work
  Progress progress;
  auto job = runtime.submit(spec, {.on_progress = [&progress](const JobEvent& e) { progress.on_event("render", e); }});
  const auto r = job.wait();
  progress.finish();
  runtime.shutdown();
  if (f.json) std::cout << json::serialize(to_json(r)) << "\n";
  if (r.state != JobState::done) {
    std::cerr << "vgen: error: " << r.error << "\n";
    return exit_code_for(r.error_kind.value_or(ErrorKind::internal));
  }
  if (!f.json) std::cout << r.output.string() << "\n";
  return 0;
}

}  // namespace

Run add_render_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("render", "Render one prompt to a video file");
  auto f = std::make_shared<RenderFlags>();
  cmd->add_option("prompt", f->prompt, "the text prompt")->required();
  cmd->add_option("-o,--output", f->output, "output file (.mp4, .webm, .gif) or frame directory (--format png)")->required();
  add_runtime_flags(*cmd, f->runtime);
  add_job_flags(*cmd, f->job);
  cmd->add_option("--image", f->image, "first frame for an image-to-video model (PNG, JPEG or WebP)");
  cmd->add_option("--last-image", f->last_image, "last frame, for models that take one (needs --image)");
  cmd->add_option("--video", f->video, "input video for a video-to-video model (MP4, WebM, MKV, AVI, ...)");
  cmd->add_option("--strength", f->strength, "with --video: (0, 1], the share of the denoising schedule run over the noised video (default 0.8)");
  cmd->add_option("--mask-video", f->mask_video, "Wan VACE: mask over the control --video (white: regenerate), its length and size");
  cmd->add_option("--reference-image", f->reference_images, "Wan VACE: a reference image (repeatable, at most 4)")->allow_extra_args(false);
  cmd->add_option("--conditioning-scale", f->conditioning_scale, "Wan VACE: weight of the control input in [0, 10] (default 1)");
  cmd->add_flag("--json", f->json, "print the result as one JSON object on stdout");
  return [f] { return run_render(*f); };
}

Run add_extend_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("extend", "Extend a video: a diffusion-forcing model goes on from its last frames' latents, an image-to-video model from its last frame");
  auto f = std::make_shared<RenderFlags>();
  f->extend = true;
  cmd->add_option("video", f->video, "the clip to extend (MP4, WebM, MKV, AVI, ...)")->required();
  cmd->add_option("prompt", f->prompt, "what happens next")->required();
  cmd->add_option("-o,--output", f->output, "output file (.mp4, .webm, .gif): the clip and its extension, one stream")->required();
  add_runtime_flags(*cmd, f->runtime);
  add_job_flags(*cmd, f->job);  // --frames: the new segment's, its first frame being the clip's last
  cmd->add_option("--last-image", f->last_image, "last frame of the extension, for models that take one");
  cmd->add_flag("--json", f->json, "print the result as one JSON object on stdout");
  return [f] { return run_render(*f); };
}

}  // namespace vgen::cli
