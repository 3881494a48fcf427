// `vgen demo [--out DIR] [--prompt P ...]`: renders a handful of prompts with the bundled
// model (models/vgen-shapes, trained by tools/demo_model/train.py) into MP4s and prints where
// they are. Takes the same runtime and job flags as render (--model, --device, --config, ...).
#include "api/engine.hpp"
#include "apps/vgen/commands.hpp"
#include "apps/vgen/options.hpp"
#include "apps/vgen/progress.hpp"

#include <boost/json.hpp>

#include <iostream>

namespace vgen::cli {

namespace {

struct DemoFlags {
  std::string out = "out/demo";
  RuntimeFlags runtime;
  JobFlags job;
  std::vector<std::string> prompts = {"a red circle moving right", "a green square moving up on a white background",
                                      "a blue triangle moving left", "a yellow circle moving down on a gray background",
                                      "a magenta square moving left", "a cyan triangle moving right"};
};

std::string slug(const std::string& prompt) {
  std::string s;
  for (unsigned char c : prompt) {
    if (std::isalnum(c)) s += static_cast<char>(std::tolower(c));
    else if (!s.empty() && s.back() != '-') s += '-';
  }
  return s.substr(0, 60);
}

int run_demo(const DemoFlags& f) {
  auto flags = f.runtime;
  flags.output_dir = f.out;
  Runtime runtime(make_config(flags));
  std::cout << "model: " << runtime.package().dir.string() << "\n";
  Progress progress(f.prompts.size());
  std::vector<JobHandle> jobs;
  for (std::size_t i = 0; i < f.prompts.size(); ++i) {
    auto spec = job_fields(f.job);
    spec["prompt"] = f.prompts[i];
    spec["name"] = std::to_string(i + 1) + "-" + slug(f.prompts[i]);
    spec["seed"] = spec.contains("seed") ? spec["seed"] : boost::json::value(i + 1);
    const auto label = spec["name"].as_string();
    jobs.push_back(runtime.submit(spec, {.on_progress = [&progress, label = std::string(label)](const JobEvent& e) {
                                    progress.on_event(label, e);
                                  }}));
  }
  int failures = 0;
  std::vector<JobResult> results;
  for (auto& j : jobs) {
    results.push_back(j.wait());
    progress.on_job_end(results.back().spec.name, std::string(to_string(results.back().state)), results.back().seconds);
  }
  progress.finish();
  for (const auto& r : results) {
    if (r.state == JobState::done) {
      std::cout << r.output.string() << "  \"" << r.spec.prompt << "\"\n";
    } else {
      ++failures;
      std::cerr << "vgen: " << r.id << ": " << r.error << "\n";
    }
  }
  return failures ? 1 : 0;
}

}  // namespace

Run add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Render a few prompts with the bundled model into MP4s");
  auto f = std::make_shared<DemoFlags>();
  cmd->add_option("--out,-o", f->out, "output directory")->capture_default_str();
  cmd->add_option("--prompt", f->prompts, "prompts to render (repeatable; default: six examples)");
  add_runtime_flags(*cmd, f->runtime);
  add_job_flags(*cmd, f->job);
  return [f] { return run_demo(*f); };
}

}  // namespace vgen::cli
