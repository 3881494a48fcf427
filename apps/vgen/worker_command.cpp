// `vgen worker --queue nats://HOST:PORT --output-dir DIR [--config FILE] [--model DIR] [--device D]
//              [--name NAME] [--capacity N]`: one worker of the fleet (api/fleet/fleet_worker.hpp). It
// loads the model, pulls jobs of its models from the JetStream queue and writes their videos to
// DIR (the fleet's shared output storage), named by job. The first line on stdout is
// "worker NAME ready" once it pulls. SIGTERM or SIGINT: it stops pulling, finishes the jobs it
// holds and exits 0; a second signal exits at once (what it held comes back after the ack wait).
#include "api/engine.hpp"
#include "api/fleet/fleet_worker.hpp"
#include "apps/vgen/commands.hpp"
#include "apps/vgen/options.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <iostream>
#include <pthread.h>
#include <thread>

namespace vgen::cli {

namespace {

struct WorkerFlags {
  RuntimeFlags runtime;
  std::string queue, name;
  std::size_t capacity = 0;
};

RuntimeConfig worker_config(const WorkerFlags& f) {
  auto c = make_config(f.runtime);
  apply_queue_flag(c, f.queue);
  if (c.queue.url.empty()) throw_error(ErrorKind::invalid_argument, "--queue: required (nats://HOST:PORT), or queue.url in --config");
  c.overwrite_outputs = true;  // a redelivered job rewrites its own file (named by job)
  fuse_when_auto(c.model_backend);  // lives on (model_backend_options.hpp)
  c.journal.clear();           // the fleet's job state is in the broker, not in a local journal
  // Never from a worker: its Runtime also sees jobs it hands back to the queue when it stops
  // (cancelled here, run elsewhere) and misses those ended without running; the front end that
  // accepted a job sends its event from the bucket's final record (api/webhooks.hpp).
  if (!c.webhooks.endpoints.empty()) {
    spdlog::warn("worker: webhooks are sent by the front end (vgen serve --queue), not by workers: the config's endpoints are ignored here");
    c.webhooks.endpoints.clear();
  }
  return c;
}

int run_worker(const WorkerFlags& f) {
  const auto config = worker_config(f);
  auto stop_signals = block_stop_signals();  // every thread inherits it; this one takes them

  Runtime runtime(config);
  FleetWorker worker(runtime, {.name = f.name, .capacity = f.capacity});
  worker.start();
  std::cout << "worker " << worker.name() << " ready" << std::endl;

  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::warn("worker {}: {} received: no more pulls, finishing the jobs held (a second signal exits at once)",
               worker.name(), signal == SIGINT ? "SIGINT" : "SIGTERM");
  std::thread second([&] {
    int again = 0;
    sigwait(&stop_signals, &again);
    spdlog::warn("worker {}: second signal: exiting now", worker.name());
    std::_Exit(130);  // nothing held is acked: the broker redelivers it after the ack wait
  });
  second.detach();
  worker.stop(/*finish_held=*/true);
  const auto s = worker.stats();
  spdlog::info("worker {}: {} received, {} done, {} failed, {} cancelled, {} redelivered, {} rewrites, {} quarantined",
               worker.name(), s.received, s.done, s.failed, s.cancelled, s.redelivered, s.rewrites, s.quarantined);
  runtime.shutdown();
  return 0;
}

}  // namespace

Run add_worker_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("worker", "Run jobs from a NATS JetStream queue (one worker of a fleet)");
  auto f = std::make_shared<WorkerFlags>();
  add_runtime_flags(*cmd, f->runtime);
  cmd->add_option("--output-dir", f->runtime.output_dir, "the fleet's shared output directory (default: config, else .)");
  cmd->add_option("--queue", f->queue, "the broker, nats://HOST:PORT (default: the config's queue.url)");
  cmd->add_option("--name", f->name, "this worker's name in job records (default: HOSTNAME-PID)");
  cmd->add_option("--capacity", f->capacity, "jobs held at once (default: batching.max_batch)")->check(CLI::Range(1, 1024));
  return [f] { return run_worker(*f); };
}

}  // namespace vgen::cli
