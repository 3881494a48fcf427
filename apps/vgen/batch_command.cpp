// `vgen batch PROMPTS --out DIR [--model DIR] [--config FILE] [job flags] [--force] [--json]
//             [--queue nats://HOST:PORT]`:
// every line of a prompt file (text or JSONL) as a job through one vgen::Runtime, concurrently
// with bounded queues, read and submitted a line at a time. Progress on stderr; a table (or
// --json, the summary object) on stdout; the summary also goes to DIR/batch-summary.json.
// One batch or service per output directory (runtime/output_lock.hpp): a second is refused.
// With --queue (or the config's queue.url) the jobs go to the fleet (api/fleet/fleet_client.hpp)
// instead: no model loaded here, DIR is the workers' shared output directory as seen from
// here, and the same summary and rerun rules apply (FleetClient::has_output).
// SIGINT/SIGTERM: the first cancels the jobs in flight, stops reading and still writes the
// summary (exit 130); a second exits at once (130). Exit code: BatchSummary::exit_code, i.e.
// exit_code_for of the run's error kind (api/batch/batch.hpp).
#include "api/batch/batch.hpp"
#ifdef VGEN_WITH_NATS
#include "api/fleet/fleet_client.hpp"
#endif
#include "apps/vgen/commands.hpp"
#include "apps/vgen/options.hpp"
#include "apps/vgen/progress.hpp"

#include <boost/json.hpp>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <stop_token>
#include <thread>

#include <pthread.h>
#include <unistd.h>

namespace vgen::cli {

namespace {

struct BatchFlags {
  std::string prompts, out, queue;
  RuntimeFlags runtime;
  JobFlags job;
  bool force = false, json = false;
};

// Takes SIGINT/SIGTERM on its own thread: the first requests a stop, a second ends the
// process at once (exit 130) whatever the run is doing. The signals must be blocked in every
// thread (block_stop_signals before any thread starts) so that only sigwait sees them.
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    thread_ = std::thread([this] { watch(); });
  }
  ~StopSignals() {
    finished_ = true;
    pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait; finished_ makes it return
    thread_.join();
  }
  std::stop_token token() const { return stop_.get_token(); }

 private:
  void watch() {
    for (int received = 0;; ++received) {
      int sig = 0;
      sigwait(&signals_, &sig);
      if (finished_) return;
      if (received > 0) {
        static const char msg[] = "\nvgen: second signal: exiting now\n";
        (void)!::write(2, msg, sizeof msg - 1);
        std::_Exit(130);
      }
      std::cerr << "\nvgen: interrupted: cancelling the jobs in flight and writing the summary (a second signal exits at once)\n";
      stop_.request_stop();
    }
  }
  sigset_t signals_;
  std::stop_source stop_;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

BatchSummary run_on_fleet([[maybe_unused]] const RuntimeConfig& config, [[maybe_unused]] BatchReader& input,
                          [[maybe_unused]] const BatchOptions& options) {
#ifdef VGEN_WITH_NATS
  FleetClient fleet(config);
  const OutputCheck complete = [&fleet](const boost::json::value& spec, const JobSpec&, const std::filesystem::path& path) {
    return fleet.has_output(spec, path);
  };
  return run_batch(fleet, complete, input, options);
#else
  throw_error(ErrorKind::invalid_argument, "--queue: this vgen was built without libnats-dev (no fleet support)");
#endif
}

int run_batch_command(const BatchFlags& f) {
  auto input = BatchReader::open_file(f.prompts, job_fields(f.job));
  input.peek();  // an empty, binary or endless (/dev/zero) file is refused before the model loads
  auto flags = f.runtime;
  if (!f.out.empty()) flags.output_dir = f.out;
  auto config = make_config(flags);
  apply_queue_flag(config, f.queue);
  const bool fleet = !config.queue.url.empty();
  if (!fleet) {
    default_journal(config, /*resume=*/false);  // a rerun resumes from the prompt file instead
    config.exclusive_output = true;             // a second batch or serve on this directory is refused
  }

  config.tune.spec = job_fields(f.job);  // "auto" settings are measured at the jobs' shape (the flags')
  StopSignals signals;  // before the Runtime (or the broker client) starts its threads, which inherit the mask
  Progress progress(0);
  BatchOptions options;
  options.force = f.force;
  options.stop = signals.token();
  options.on_event = [&progress](const std::string& name, const JobEvent& e) { progress.on_event(name, e); };
  options.on_item_end = [&progress](const BatchItemResult& r, std::size_t, std::size_t total) {
    if (total) progress.set_total(total);
    progress.on_job_end(r.name, r.status + (r.cache_hit ? " (cache)" : ""), r.seconds);
  };
  const auto summary = fleet ? run_on_fleet(config, input, options) : [&] {
    Runtime runtime(config);
    return run_batch(runtime, input, options);
  }();
  progress.finish();
  if (f.json) {
    summary.write_json(std::cout);
    std::cout << "\n";
  } else {
    summary.write_table(std::cout);
  }
  for (const auto& i : summary.items)
    if (!i.error.empty()) std::cerr << "vgen: " << i.error << "\n";
  if (!summary.summary_error.empty()) std::cerr << "vgen: error: could not write the summary: " << summary.summary_error << "\n";
  return summary.exit_code();
}

}  // namespace

Run add_batch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("batch", "Render every prompt of a text or JSONL file into a directory");
  auto f = std::make_shared<BatchFlags>();
  cmd->add_option("prompts", f->prompts, "prompt file: one prompt per line, or JSONL (one job object per line)")->required();
  cmd->add_option("--out,-o,--output-dir", f->out, "output directory (created if missing; default: the config's)");
  add_runtime_flags(*cmd, f->runtime);
  add_job_flags(*cmd, f->job);
  cmd->add_option("--queue", f->queue, "run the jobs on the fleet behind this NATS broker (nats://HOST:PORT); --out: the workers' shared output directory");
  cmd->add_flag("--force", f->force, "render again even when a complete output exists");
  cmd->add_flag("--json", f->json, "print the summary as one JSON object instead of a table");
  return [f] { return run_batch_command(*f); };
}

}  // namespace vgen::cli
