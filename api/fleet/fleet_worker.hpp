// FleetWorker: one worker of the fleet (api/fleet/fleet_queue.hpp). It pulls jobs of its models from
// the JetStream work queue and runs them through a vgen::Runtime, the same pipeline as an
// embedded run (cross-job batching over the jobs it holds), writing each job's state to the
// bucket and acking a job only once its record says how it ended.
//
//   Runtime runtime(config);                         // config.output_dir: the shared output folder
//   FleetWorker worker(runtime, {.name = "gpu-3"});  // connects; Error(transient) if it cannot
//   worker.start();  ...  worker.stop();             // stop: no more pulls, held jobs finish
//
// Delivery rules (what makes "every job exactly once" hold across crashes):
// - A job is held only while its message is unacked: in-progress acks every ack_wait / 3 keep it;
//   a worker that dies stops sending them and the broker redelivers the job after ack_wait.
// - Outputs are named by job (the spec's "name") and written atomically, so a redelivered job
//   rewrites the same file; a job whose record already says done (its worker died between the
//   record and the ack) is acked without running again. The record counts writes.
// - crashes = deliveries - 1 - returned (deliveries handed back by a stopping worker). A job with
//   crashes >= max_crashes is terminated and recorded failed ("crashed the worker N times"); a
//   job with crashes > 0 is a suspect and runs alone, so an innocent job held beside the one
//   that crashed is never quarantined for it.
// - Backpressure: it runs at most `capacity` jobs and fetches only as many as it has room for;
//   the long poll for the next job holds no room (so that a model without jobs never delays
//   another's), and a job it brings when the room is full waits held: at most one per model.
// Threads: one pull thread per model consumer (blocking fetches, a server-side long poll: no
// busy polling, an idle worker sleeps in the kernel), one completion thread (records, acks and
// the in-progress timer), the Runtime's threads for compute, and nats.c's threads (a cancel
// request only calls JobHandle::cancel). No io thread ever waits on the broker.
// Thread-safety: start/stop/stats from any thread; stop is idempotent and blocks until the held
// jobs ended (finished, or with finish_held = false cancelled and handed back with a nak).
// Lifetime: the Runtime must outlive the FleetWorker.
#pragma once

#include "api/engine.hpp"
#include "api/fleet/fleet_queue.hpp"

#include <memory>
#include <string>
#include <vector>

namespace vgen {

struct FleetWorkerOptions {
  std::string name;                 // empty: "<hostname>-<pid>"
  std::size_t capacity = 0;         // jobs held at once; 0: the Runtime's max_batch (at least 1)
  std::vector<std::string> models;  // subjects served; empty: "default" and the Runtime's model names
};

struct FleetWorkerStats {
  std::uint64_t received = 0, done = 0, failed = 0, cancelled = 0, returned = 0;
  std::uint64_t redelivered = 0;   // deliveries after the first
  std::uint64_t rewrites = 0;      // outputs written again (a job whose earlier run wrote it)
  std::uint64_t already_done = 0;  // redelivered jobs whose record said done: acked, not run
  std::uint64_t quarantined = 0;
  std::size_t held = 0;
};

class FleetWorker {
 public:
  FleetWorker(Runtime& runtime, FleetWorkerOptions options = {});
  ~FleetWorker();
  FleetWorker(const FleetWorker&) = delete;
  FleetWorker& operator=(const FleetWorker&) = delete;

  void start();
  void stop(bool finish_held = true);
  FleetWorkerStats stats() const;
  const std::string& name() const;
  const std::vector<std::string>& models() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// The names a Runtime's jobs may give in "model": its default model's directory name and the
// names of config.models.
std::vector<std::string> model_names(const RuntimeConfig& config);

}  // namespace vgen
