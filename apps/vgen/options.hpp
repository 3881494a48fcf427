// Flags shared by `render`, `batch` and `serve`: the runtime (--config, --model, --device,
// --output-dir) and job defaults (--width, --steps, ...). A --config file is read first and
// the flags given on the command line override it.
#pragma once

#include "api/config.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/object.hpp>

#include <csignal>
#include <optional>
#include <string>
#include <vector>

namespace vgen::cli {

struct RuntimeFlags {
  std::string config, model, devices;
  std::optional<std::string> output_dir;
  std::optional<std::size_t> max_batch;  // RuntimeConfig::kAuto for "auto"
  std::optional<std::string> lora_dir;
  std::optional<std::string> trace;  // --trace FILE
};
void add_runtime_flags(CLI::App& cmd, RuntimeFlags& f);
RuntimeConfig make_config(const RuntimeFlags& f);
// batch and serve keep a journal in their output directory unless the config names one.
void default_journal(RuntimeConfig& c, bool resume);

struct JobFlags {
  std::optional<int> width, height, frames, steps;
  std::optional<double> guidance, fps;
  std::optional<double> step_cache;  // step-cache threshold (0: off)
  std::optional<int> priority;       // higher first; the job spec checks the range
  std::optional<double> shift;       // the scheduler's flow shift
  std::optional<std::string> precision;  // the denoiser variant: float32 | int8 (default: the package's)
  std::optional<std::uint64_t> seed;
  std::optional<std::string> scheduler, negative_prompt, format;
  std::vector<std::string> loras;  // NAME[:SCALE], repeatable
  std::optional<int> interpolate, upscale;  // post-stages: 2 or 4 (the job spec checks)
};
void add_job_flags(CLI::App& cmd, JobFlags& f);
boost::json::object job_fields(const JobFlags& f);  // only the flags given

// serve, worker and batch: --queue nats://HOST:PORT, over the config's queue (an empty flag: unchanged).
void apply_queue_flag(RuntimeConfig& c, const std::string& url);

// serve and worker stop on SIGINT/SIGTERM: blocks both in the calling thread and returns the
// set for sigwait. Call it before any thread starts, so that every thread inherits the mask and
// the caller alone takes the signals.
sigset_t block_stop_signals();

}  // namespace vgen::cli
