// JobService: what a front end (HttpApi, an embedding service) needs of whoever runs jobs.
// Two implementations: vgen::Runtime (api/engine.hpp: jobs run in this process) and
// vgen::FleetClient (api/fleet/fleet_client.hpp: jobs go to a fleet of workers through NATS
// JetStream). The same job spec, JobHandle (progress events, cancel, result, awaitable
// result) and errors for both, so a service switches between them with one line.
// Thread-safety, blocking and cancellation: as each implementation's header states; both
// allow every member from any thread, and submit() (which may wait for room) must not be
// called on an io thread (try_submit / async_submit there).
#pragma once

#include "runtime/job_store.hpp"
#include "stages/job_spec.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <vector>

namespace vgen {

class JobHandle;
class LiveBroadcast;  // stages/media/live_broadcast.hpp
class Tracer;
struct SubmitOptions;
struct RuntimeConfig;

// One model a service serves, as a front end describes it (GET /v1/models; /v1/videos maps
// "size" and "seconds" onto its defaults and limits: fps, frame step).
struct ServedModel {
  std::string name;    // what a job's "model" field names; the first one is the default
  JobSpec defaults;    // the package's job defaults
  SpecLimits limits;   // the package's limits
};

class JobService {
 public:
  virtual ~JobService() = default;
  virtual JobHandle submit(boost::json::value spec, SubmitOptions options) = 0;
  // Never waits for room: Error(overloaded) when the queue is at its limit.
  virtual JobHandle try_submit(boost::json::value spec, SubmitOptions options) = 0;
  virtual boost::asio::awaitable<JobHandle> async_submit(boost::json::value spec, SubmitOptions options) = 0;
  // Parses a spec as submit would (the fleet checks less: its workers check the rest).
  virtual JobSpec validate(const boost::json::value& spec) const = 0;
  // Admits a spec as submit does before it accepts the job: validates it, reads and hashes the
  // job's files, and writes into `spec` what the job's bytes depend on beyond it (a Runtime: an
  // extend's video frame rate and kept latents), so its content key is the accepted job's. The
  // fleet admits the job's images and video only (its workers resolve the rest). Blocks on
  // reading the files.
  virtual JobSpec admit(boost::json::value& spec) const = 0;
  virtual std::optional<JobHandle> find(const std::string& id) const = 0;
  virtual std::vector<JobHandle> unfinished() const = 0;
  virtual JobPage list_jobs(const JobListQuery& query) const = 0;  // newest accepted first
  virtual bool previews(const std::string& model) const = 0;      // whether its jobs get preview images
  virtual bool cancel(const std::string& id, std::string reason) = 0;
  virtual const RuntimeConfig& config() const = 0;
  virtual std::string metrics_text() const = 0;  // Prometheus text exposition
  virtual boost::asio::any_io_executor executor() const = 0;  // where a front end runs its coroutines
  // Whether try_submit waits on another machine (a broker round trip): a front end then calls it
  // on executor(), never on its own io threads. (wt-nats, issue 19)
  virtual bool submit_is_remote() const { return false; }
  virtual Tracer& tracer() const = 0;  // its timeline recorder (runtime/trace.hpp; GET /v1/trace)
  // The models jobs may name, the default first. Empty where this process holds no package (the
  // fleet's front end: its workers have them); a front end then falls back to the config's names.
  virtual std::vector<ServedModel> served_models() const { return {}; }
  // A running job's video as it is written (fragmented MP4; GET ...?live=1), or nullptr: a job
  // that is unknown or has ended, or a service whose jobs encode elsewhere (the fleet).
  virtual std::shared_ptr<LiveBroadcast> live_stream(const std::string& /*id*/) const { return nullptr; }
};

}  // namespace vgen
