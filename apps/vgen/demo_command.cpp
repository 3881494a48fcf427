// `vgen demo`: renders a few clips through the runtime. Until a model package lands this is
// the PLACEHOLDER pipeline (stages/placeholder_pipeline.hpp): real runtime and encoder, a
// synthetic test pattern instead of a diffusion model.
#include "apps/vgen/commands.hpp"
#include "runtime/executor.hpp"
#include "runtime/metrics.hpp"
#include "runtime/pipeline.hpp"
#include "stages/placeholder_pipeline.hpp"

#include <boost/json.hpp>

#include <iostream>
#include <mutex>

namespace vgen::cli {

namespace asio = boost::asio;

namespace {

struct DemoFlags {
  std::string out = "out/demo";
  int width = 256, height = 256, frames = 17, steps = 8;
  double fps = 16;
  std::string format = "mp4";
  std::vector<std::string> prompts = {"a red circle moving right", "a green square moving up",
                                      "a blue triangle moving left", "a yellow circle moving down"};
};

// Submits every prompt (waiting when the queue is full), then drains the pipeline.
asio::awaitable<std::vector<std::shared_ptr<Job>>> submit_all(Pipeline& pipeline,
                                                              std::vector<std::string> prompts) {
  std::vector<std::shared_ptr<Job>> submitted;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    boost::json::object spec;
    spec["prompt"] = prompts[i];
    spec["name"] = "clip-" + std::to_string(i + 1);
    submitted.push_back(co_await pipeline.submit(std::move(spec)));
  }
  co_await pipeline.drain();
  co_return submitted;
}

int run_demo(const DemoFlags& f) {
  std::filesystem::create_directories(f.out);
  Executor executor({.io_threads = 1});
  add_device_pools(executor, parse_device_list("cpu"));
  auto& compute = executor.pool(device_pool_name("cpu:0"));
  auto& codec = executor.pool("codec");
  PlaceholderOptions options;
  options.out_dir = f.out;
  options.width = f.width;
  options.height = f.height;
  options.frames = f.frames;
  options.steps = f.steps;
  options.fps = f.fps;
  options.encode.format = f.format;
  options.compute = &compute;
  options.codec = &codec;

  std::mutex print;
  PipelineOptions popts;
  MetricsRegistry metrics;
  popts.metrics = &metrics;
  popts.on_event = [&print](const JobEvent& e) {
    std::lock_guard l(print);
    std::cerr << e.job_id << ": " << to_string(e.state);
    if (e.total) std::cerr << " step " << e.step << "/" << e.total;
    if (!e.message.empty()) std::cerr << " (" << e.message << ")";
    std::cerr << "\n";
  };
  Pipeline pipeline(executor.get_executor(), make_placeholder_stages(options), popts);
  pipeline.start();

  std::cout << "vgen demo: PLACEHOLDER pipeline (no diffusion model yet: synthetic test pattern,"
               " real runtime and real " << f.format << " encoding)\n";
  auto jobs = executor.run_sync(submit_all(pipeline, f.prompts));
  int exit_code = 0;
  for (const auto& job : jobs) {
    const auto s = job->snapshot();
    if (s.state == JobState::done) {
      const auto& r = std::any_cast<const PlaceholderResult&>(job->payload);
      std::cout << "  " << r.output.string() << "  (" << s.total_seconds << " s)\n";
    } else {
      if (!exit_code) exit_code = exit_code_for(s.error_kind.value_or(ErrorKind::internal));
      std::cout << "  " << s.id << " " << to_string(s.state) << ": " << s.error << "\n";
    }
  }
  executor.stop();
  return exit_code;
}

}  // namespace

Run add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Render a few demo clips (placeholder pipeline until a model lands)");
  auto f = std::make_shared<DemoFlags>();
  cmd->add_option("--out", f->out, "output directory")->capture_default_str();
  cmd->add_option("--width", f->width)->check(CLI::Range(16, 4096))->capture_default_str();
  cmd->add_option("--height", f->height)->check(CLI::Range(16, 4096))->capture_default_str();
  cmd->add_option("--frames", f->frames)->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_option("--fps", f->fps)->check(CLI::Range(1.0, 240.0))->capture_default_str();
  cmd->add_option("--format", f->format)->check(CLI::IsMember(encoder_formats()))->capture_default_str();
  cmd->add_option("--prompt", f->prompts, "prompts (repeatable)");
  return [f] { return run_demo(*f); };
}

}  // namespace vgen::cli
