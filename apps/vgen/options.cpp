#include "apps/vgen/options.hpp"

#include <boost/json/array.hpp>

#include <cstdlib>
#include <pthread.h>

namespace vgen::cli {

void add_runtime_flags(CLI::App& cmd, RuntimeFlags& f) {
  cmd.add_option("--config", f.config, "runtime config file (configs/*.json); flags override it");
  cmd.add_option("--model", f.model, "model package directory (default: the bundled model)");
  cmd.add_option("--device,--devices", f.devices, "devices: cpu, cpu,cpu, cuda:0, cuda:0,cuda:1, auto (default: cpu)");
  cmd.add_option_function<std::string>(
         "--max-batch",
         [&f](const std::string& v) {
           if (v == "auto") {
             f.max_batch = RuntimeConfig::kAuto;
             return;
           }
           std::size_t n = 0;
           std::size_t used = 0;
           try {
             n = std::stoul(v, &used);
           } catch (const std::exception&) {
             used = 0;
           }
           if (used != v.size() || n < 1 || n > 256) throw CLI::ValidationError("--max-batch", "must be auto or 1..256 (got " + v + ")");
           f.max_batch = n;
         },
         "cross-job batching: jobs per denoiser call, or auto (default: auto, measured at start)")
      ->type_name("N|auto");
  cmd.add_option("--lora-dir", f.lora_dir, "folder of LoRA files (NAME.safetensors) that jobs' LoRAs name");
  cmd.add_option("--trace", f.trace, "write the run's timeline to FILE as Chrome/Perfetto trace JSON (ui.perfetto.dev)");
}

RuntimeConfig make_config(const RuntimeFlags& f) {
  RuntimeConfig c = f.config.empty() ? RuntimeConfig{} : load_config(f.config);
  if (!f.model.empty()) c.model = f.model;
  if (!f.devices.empty()) c.devices = f.devices;
  if (f.output_dir) c.output_dir = *f.output_dir;
  if (f.max_batch) c.batching.max_batch = *f.max_batch;
  if (f.lora_dir) c.loras.dir = *f.lora_dir;
  if (f.trace) c.trace_file = *f.trace;
  read_environment(c);  // the process's environment: the app is the edge that reads it
  return c;
}

void default_journal(RuntimeConfig& c, bool resume) {
  if (c.journal.empty()) c.journal = c.output_dir / ".vgen-journal.db";
  c.resume_journal = resume;
  std::error_code ec;
  std::filesystem::create_directories(c.output_dir, ec);  // the journal lives there
}

void add_job_flags(CLI::App& cmd, JobFlags& f) {
  cmd.add_option("--width", f.width);
  cmd.add_option("--height", f.height);
  cmd.add_option("--frames", f.frames, "frame count (the model's rule, e.g. 4k+1 for Wan)");
  cmd.add_option("--steps", f.steps, "denoising steps");
  cmd.add_option("--guidance", f.guidance, "classifier-free guidance scale (> 1 enables it)");
  cmd.add_option("--shift", f.shift, "the scheduler's flow shift (default: a LoRA's suggestion, else the package's)");
  cmd.add_option("--precision", f.precision, "the denoiser's weights: float32, bfloat16, float16, int8 or fp8 (a variant the package carries; default: the package's, its own float weights for a bf16 default on a CPU without native bf16)");
  cmd.add_option("--step-cache", f.step_cache, "step-cache threshold: reuse the denoiser's last change while the estimated change stays below it (0: off)");
  cmd.add_option("--seed", f.seed);
  cmd.add_option("--priority", f.priority, "scheduling priority, -100..100 (default 0): higher first; it may preempt lower-priority denoising");
  cmd.add_option("--fps", f.fps);
  cmd.add_option("--scheduler", f.scheduler, "scheduler class name (default: the package's)");
  cmd.add_option("--negative-prompt", f.negative_prompt);
  cmd.add_option("--format", f.format, "mp4, webm, gif or png");
  cmd.add_option("--lora", f.loras, "a LoRA from --lora-dir, NAME[:SCALE] (scale 1 by default); repeatable");
  cmd.add_option("--interpolate", f.interpolate, "frame interpolation after decode, 2 or 4: (frames-1)xN+1 frames at N x fps");
  cmd.add_option("--upscale", f.upscale, "upscaling after decode, 2 or 4: N x width by N x height");
}

boost::json::object job_fields(const JobFlags& f) {
  boost::json::object o;
  if (f.width) o["width"] = *f.width;
  if (f.height) o["height"] = *f.height;
  if (f.frames) o["frames"] = *f.frames;
  if (f.steps) o["steps"] = *f.steps;
  if (f.guidance) o["guidance"] = *f.guidance;
  if (f.step_cache) o["step_cache"] = *f.step_cache;
  if (f.shift) o["shift"] = *f.shift;
  if (f.precision) o["precision"] = *f.precision;  // checked by the job spec, naming the field
  if (f.seed) o["seed"] = *f.seed;
  if (f.priority) o["priority"] = *f.priority;
  if (f.fps) o["fps"] = *f.fps;
  if (f.scheduler) o["scheduler"] = *f.scheduler;
  if (f.negative_prompt) o["negative_prompt"] = *f.negative_prompt;
  if (f.format) o["format"] = *f.format;
  if (f.interpolate) o["interpolate"] = *f.interpolate;
  if (f.upscale) o["upscale"] = *f.upscale;
  if (!f.loras.empty()) {  // NAME[:SCALE]; a bad scale is left for the job spec to name
    boost::json::array a;
    for (const auto& l : f.loras) {
      const auto colon = l.rfind(':');
      boost::json::object e{{"name", l.substr(0, colon)}};
      if (colon != std::string::npos) {
        const auto scale = l.substr(colon + 1);
        char* end = nullptr;
        const double x = std::strtod(scale.c_str(), &end);
        if (scale.empty() || *end != '\0') e["scale"] = scale;  // a string: "loras[i].scale: must be a number"
        else e["scale"] = x;
      }
      a.push_back(std::move(e));
    }
    o["loras"] = std::move(a);
  }
  return o;
}

void apply_queue_flag(RuntimeConfig& c, const std::string& url) {
  if (!url.empty()) c.queue = parse_queue_config({{"url", url}}, "--queue: ", c.queue);
}

sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

}  // namespace vgen::cli
