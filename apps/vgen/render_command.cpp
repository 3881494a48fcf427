// `vgen render PROMPT -o FILE --model DIR [...]`: one job through the real Wan stages.
#include "apps/vgen/commands.hpp"
#include "runtime/device_pool.hpp"
#include "runtime/errors.hpp"
#include "runtime/executor.hpp"
#include "runtime/pipeline.hpp"
#include "stages/torch_devices.hpp"
#include "stages/wan_pipeline.hpp"

#include <boost/json.hpp>

#include <iostream>
#include <unistd.h>

namespace vgen::cli {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

struct RenderFlags {
  std::string prompt, output, model, devices = "cpu", scheduler, negative_prompt, format;
  std::optional<int> width, height, frames, steps;
  std::optional<double> guidance, fps;
  std::optional<std::uint64_t> seed;
  bool negative_given = false;
  bool json = false;
};

// The machine-readable result of `render --json` (one JSON object on stdout).
json::object result_json(const Job& job) {
  const auto s = job.snapshot();
  json::object o{{"job_id", s.id}, {"status", std::string(to_string(s.state))}, {"seconds", s.total_seconds}};
  json::object stages;
  for (const auto& [name, secs] : s.stage_seconds) stages[name] = secs;
  o["stage_seconds"] = std::move(stages);
  if (s.state == JobState::done) {
    const auto r = wan_job_result(job);
    o["output"] = r.output.string();
    o["device"] = r.device;
    o["text_cache_hit"] = r.text_cache_hit;
    o["spec"] = to_json(r.spec);
  } else {
    o["error"] = s.error;
    o["error_kind"] = std::string(to_string(s.error_kind.value_or(ErrorKind::internal)));
  }
  return o;
}

// Output path -> (directory, stem, format). The format comes from --format or the extension.
void split_output(const RenderFlags& f, fs::path& dir, std::string& stem, std::string& format) {
  fs::path out(f.output);
  format = f.format;
  const auto ext = out.extension().string();
  if (format.empty()) {
    if (ext == ".mp4" || ext == ".webm" || ext == ".gif") format = ext.substr(1);
    else throw_error(ErrorKind::invalid_argument, "output: cannot tell the format from '" + f.output +
                                                      "' (use .mp4, .webm, .gif, or --format png for a frame directory)");
  }
  dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  stem = (format == "png" || ext.empty()) ? out.filename().string() : out.stem().string();
  if (!fs::is_directory(dir)) throw_error(ErrorKind::invalid_argument, "output: directory '" + dir.string() + "' does not exist");
}

json::object job_json(const RenderFlags& f, const std::string& stem, const std::string& format) {
  json::object o{{"prompt", f.prompt}, {"name", stem}, {"format", format}};
  if (f.negative_given) o["negative_prompt"] = f.negative_prompt;
  if (f.width) o["width"] = *f.width;
  if (f.height) o["height"] = *f.height;
  if (f.frames) o["frames"] = *f.frames;
  if (f.steps) o["steps"] = *f.steps;
  if (f.guidance) o["guidance"] = *f.guidance;
  if (f.fps) o["fps"] = *f.fps;
  if (f.seed) o["seed"] = *f.seed;
  if (!f.scheduler.empty()) o["scheduler"] = f.scheduler;
  return o;
}

asio::awaitable<std::shared_ptr<Job>> run_one(Pipeline& pipeline, json::object spec) {
  auto job = co_await pipeline.submit(std::move(spec));
  co_await pipeline.drain();
  co_return job;
}

int run_render(const RenderFlags& f) {
  if (f.model.empty()) throw_error(ErrorKind::invalid_argument, "--model: a model package directory is required");
  fs::path dir;
  std::string stem, format;
  split_output(f, dir, stem, format);
  const auto devices = parse_device_list(f.devices, discover_cuda_devices);

  Executor executor({.io_threads = 1});
  add_device_pools(executor, devices);
  DevicePool pool(devices);
  WanRuntimeOptions options;
  options.out_dir = dir;
  auto runtime = make_wan_runtime(f.model, executor, pool, options);
  const auto spec = job_json(f, stem, format);
  parse_wan_job(package_of(*runtime), spec);  // bad input fails here, before any work

  PipelineOptions popts;
  const bool tty = isatty(2);
  popts.on_event = [tty](const JobEvent& e) {
    if (e.state == JobState::denoise && e.total > 0) {
      if (tty) std::cerr << "\rdenoise step " << e.step << "/" << e.total << std::flush;
      else std::cerr << "denoise step " << e.step << "/" << e.total << "\n";
      if (tty && e.step == e.total) std::cerr << "\n";
    } else if (e.step == 0 && e.total == 0) {
      std::cerr << to_string(e.state) << (e.message.empty() ? "" : ": " + e.message) << "\n";
    }
  };
  Pipeline pipeline(executor.get_executor(), make_wan_stages(runtime), popts);
  pipeline.start();
  auto job = executor.run_sync(run_one(pipeline, spec));
  executor.stop();
  const auto s = job->snapshot();
  if (f.json) std::cout << json::serialize(result_json(*job)) << "\n";
  if (s.state != JobState::done) {
    std::cerr << "vgen: error: " << s.error << "\n";
    return exit_code_for(s.error_kind.value_or(ErrorKind::internal));
  }
  if (!f.json) std::cout << wan_job_result(*job).output.string() << "\n";
  return 0;
}

}  // namespace

Run add_render_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("render", "Render one prompt to a video file with a model package");
  auto f = std::make_shared<RenderFlags>();
  cmd->add_option("prompt", f->prompt, "the text prompt")->required();
  cmd->add_option("-o,--output", f->output, "output file (.mp4, .webm, .gif) or frame directory (--format png)")->required();
  cmd->add_option("--model", f->model, "model package directory");
  cmd->add_option("--device,--devices", f->devices, "devices: cpu, cpu,cpu, cuda:0, cuda:0,cuda:1, auto")->capture_default_str();
  cmd->add_option("--width", f->width);
  cmd->add_option("--height", f->height);
  cmd->add_option("--frames", f->frames, "frame count (4k+1)");
  cmd->add_option("--steps", f->steps, "denoising steps");
  cmd->add_option("--guidance", f->guidance, "classifier-free guidance scale (> 1 enables it)");
  cmd->add_option("--seed", f->seed);
  cmd->add_option("--fps", f->fps);
  cmd->add_option("--scheduler", f->scheduler, "scheduler class name (default: the package's)");
  cmd->add_option("--format", f->format, "mp4, webm, gif or png (default: from the output's extension)");
  cmd->add_flag("--json", f->json, "print the result as one JSON object on stdout");
  cmd->add_option("--negative-prompt", f->negative_prompt)->each([f](const std::string&) { f->negative_given = true; });
  return [f] { return run_render(*f); };
}

}  // namespace vgen::cli
