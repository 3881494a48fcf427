// `vgen batch PROMPTS --out DIR [--model DIR] [--config FILE] [job flags] [--force] [--json]`:
// every line of a prompt file (text or JSONL) as a job through one vgen::Runtime, concurrently
// with bounded queues. Progress on stderr; a table (or --json, the summary object) on stdout;
// the summary also goes to DIR/batch-summary.json. Exit code: 0 all done or skipped, 2 some
// lines invalid, 1 some job failed (api/batch.hpp).
#include "api/batch.hpp"
#include "apps/vgen/commands.hpp"
#include "apps/vgen/options.hpp"
#include "apps/vgen/progress.hpp"

#include <boost/json.hpp>

#include <atomic>
#include <csignal>
#include <iostream>
#include <thread>

namespace vgen::cli {

namespace {

struct BatchFlags {
  std::string prompts, out;
  RuntimeFlags runtime;
  JobFlags job;
  bool force = false, json = false;
};

int run_batch_command(const BatchFlags& f) {
  auto items = read_batch_file(f.prompts, job_fields(f.job));
  auto flags = f.runtime;
  if (!f.out.empty()) flags.output_dir = f.out;

  // SIGINT/SIGTERM: cancel what is running and still write the summary. The signals are
  // blocked before the Runtime starts its threads, so only the watcher receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto config = make_config(flags);
  default_journal(config, /*resume=*/false);  // a rerun resumes from the prompt file instead
  Runtime runtime(config);
  std::atomic<bool> finished{false};
  std::thread watcher([&runtime, &finished, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (finished) return;
    std::cerr << "\nvgen: interrupted: cancelling the remaining jobs\n";
    runtime.shutdown();
  });
  auto stop_watcher = [&] {
    finished = true;
    pthread_kill(watcher.native_handle(), SIGTERM);
    watcher.join();
  };

  Progress progress(items.size());
  BatchOptions options;
  options.force = f.force;
  options.on_event = [&progress](const BatchItem& item, const JobEvent& e) { progress.on_event(item.name, e); };
  options.on_item_end = [&progress](const BatchItemResult& r, std::size_t, std::size_t) {
    progress.on_job_end(r.name, r.status + (r.cache_hit ? " (cache)" : ""), r.seconds);
  };
  BatchSummary summary;
  try {
    summary = run_batch(runtime, items, options);
  } catch (...) {
    stop_watcher();
    throw;
  }
  stop_watcher();
  progress.finish();
  if (f.json) std::cout << boost::json::serialize(summary.to_json()) << "\n";
  else std::cout << summary.table();
  for (const auto& i : summary.items)
    if (!i.error.empty()) std::cerr << "vgen: " << i.error << "\n";
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
  cmd->add_flag("--force", f->force, "render again even when a complete output exists");
  cmd->add_flag("--json", f->json, "print the summary as one JSON object instead of a table");
  return [f] { return run_batch_command(*f); };
}

}  // namespace vgen::cli
