// The fleet's contract on NATS JetStream, shared by front ends (FleetClient) and workers
// (FleetWorker): where jobs go, what a job's state record holds, and the queue settings.
//
//   stream   <stream> (work-queue retention, file storage, at most max_pending messages:
//            a publish beyond is refused, HTTP 429) on subjects <subject_prefix>.<model>
//   consumer one durable pull consumer per model, "<stream>_<model>", shared by every worker
//            of that model: explicit ack, ack_wait renewed by in-progress acks while a job
//            runs, redelivery after back-off; a job that crashed its worker max_crashes times
//            is terminated by the next worker that receives it (recorded failed)
//   bucket   <bucket>: key-value, one record per job id (FleetRecord as JSON), the fleet's only
//            job state; front ends watch it (status, SSE progress), workers write it
//   cancel   <cancel_subject>.<job id>: core NATS; the worker holding the job cancels it
// A job message is {"id", "spec"}; the spec's "name" is the job id unless the client named it,
// so the output file is named by job and a redelivered job rewrites the same file.
// Thread-safety: plain values and pure functions.
#pragma once

#include "runtime/errors.hpp"

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace vgen {

struct QueueConfig {
  std::string url;                      // nats://HOST:PORT; empty: no fleet (jobs run in-process)
  std::string stream = "VGEN_JOBS";
  std::string subject_prefix = "vgen.jobs";
  std::string bucket = "vgen_jobs";
  std::string cancel_subject = "vgen.cancel";
  std::chrono::milliseconds ack_wait{60000};
  // Redelivery back-off (JetStream BackOff): delivery n of a job is redelivered backoff[n-1] after
  // its worker's last sign of life (the last value repeats); empty: ack_wait for every delivery.
  // In-progress acks come every min(ack_wait, backoff) / 3.
  std::vector<std::chrono::milliseconds> backoff;
  int max_crashes = 2;                  // quarantine: deliveries that ended in a crash before a job is failed
  std::int64_t max_pending = 10000;     // jobs waiting or running in the stream (429 beyond)
  std::chrono::seconds record_ttl{86400};  // how long the bucket keeps a job's record
  std::chrono::milliseconds fetch_wait{5000};  // a worker's long poll (no busy polling)
};

// Reads a config file's "queue" object; Error(invalid_argument) naming "<origin>queue.<key>".
QueueConfig parse_queue_config(const boost::json::object& json, const std::string& origin, QueueConfig base = {});
boost::json::object to_json(const QueueConfig& config);

// A model's name as a subject token: letters, digits, '-' and '_' kept, anything else '_'.
std::string subject_token(const std::string& model);
// "default" for a spec without "model" (workers of every model take those).
std::string job_subject(const QueueConfig& config, const std::string& model);
std::string consumer_name(const QueueConfig& config, const std::string& model);
std::string cancel_subject(const QueueConfig& config, const std::string& id);

// One job's state in the bucket.
struct FleetRecord {
  std::string id, model;
  std::string status = "queued";  // queued | running | done | failed | cancelled
  std::string stage;              // while running: preprocess | denoise | decode | encode
  std::string worker;             // who runs (ran) it
  int step = 0, total = 0;
  int attempts = 0;               // times a worker started it (a crash leaves one unfinished)
  int returned = 0;               // deliveries handed back by a stopping worker (not crashes)
  int writes = 0;                 // times its output was written: > 1 are idempotent rewrites
  std::string output, content_type, device;
  // Set when done: the output's content key (what its "vgen:" tag holds) and its size, so that a
  // batch rerun on a front end (which has no model) can tell that file is this job's output.
  std::string key;
  std::uint64_t output_bytes = 0;
  std::string error_kind, error;
  double seconds = 0;             // the last run's time on its worker
  double submitted_unix = 0, finished_unix = 0;
  bool cancel_requested = false;
  boost::json::object spec;
};
boost::json::object to_json(const FleetRecord& record);
// Error(invalid_argument) when the text is not a record.
FleetRecord parse_fleet_record(std::string_view text);
bool is_final(const FleetRecord& record);

}  // namespace vgen
