// FleetClient: a JobService (api/job_service.hpp) whose jobs run on a fleet of workers
// (api/fleet_worker.hpp) behind NATS JetStream (api/fleet_queue.hpp). Same job spec, JobHandle,
// progress events, cancel and awaitable result as vgen::Runtime, so an embedding service or
// `vgen serve --queue` switches with one line:
//
//   vgen::FleetClient fleet(config);        // config.queue.url = "nats://broker:4222"
//   auto job = fleet.submit({{"prompt", "a red circle moving left"}});
//   vgen::JobResult r = job.wait();         // r.output: the file on the shared output storage
//
// It holds no job state of its own: a job exists once its record is in the bucket and its
// message in the stream (submit returns only after the broker acknowledged both), and what a
// handle shows comes from watching the bucket (every record at start, then each update), so
// several front ends can serve the same jobs and a restarted one finds them all.
// Validation here is light (a JSON object, a non-empty "prompt", "name" and "model" strings
// that are plain names); the worker validates against its model, and a bad spec ends failed
// with invalid_argument.
// Cancellation: cancel() or JobHandle::cancel() records the request and tells the worker that
// holds the job (core subject <cancel_subject>.<id>); a job not yet started is cancelled when
// a worker receives it.
// Webhooks (config.webhooks.endpoints, api/webhooks.hpp): this front end announces the end of
// each job it submitted, from the job's final record, at least once: the job is watched in the
// outbox (webhooks.outbox, default <output_dir>/.vgen-webhooks.db) before its record is put, so
// a front end restarted after a crash announces what ended meanwhile (the bucket watch replays
// every record; records expire after queue.record_ttl). Jobs of other front ends are theirs to
// announce. Front ends on one output storage need each its own webhooks.outbox.
// Threads: nats.c's watch thread updates the handles (listeners run there: keep them cheap); a
// two-thread pool runs async_submit's broker round trip, so no io thread waits on the broker.
// Blocking: the constructor, submit and try_submit are broker round trips (up to the connect
// timeout, 5 s). try_submit: Error(overloaded) when the stream holds queue.max_pending jobs;
// submit waits for room instead: it tries again when the bucket watch sees a job end (at the
// latest after 1 s, for a place freed without a final record). Error(transient) when the
// broker is away.
// Lifetime: handles stay valid after the client is destroyed; they stop updating.
#pragma once

#include "api/engine.hpp"
#include "api/job_service.hpp"

#include <chrono>
#include <filesystem>
#include <memory>

namespace vgen {

struct FleetClientStats {
  std::uint64_t submitted = 0, rejected = 0;
  std::size_t known_jobs = 0;  // records seen in the bucket and not yet expired here
};

class FleetClient : public JobService {
 public:
  explicit FleetClient(RuntimeConfig config);  // Error(invalid_argument) without config.queue.url
  ~FleetClient() override;
  FleetClient(const FleetClient&) = delete;
  FleetClient& operator=(const FleetClient&) = delete;

  JobHandle submit(boost::json::value spec, SubmitOptions options = {}) override;
  JobHandle try_submit(boost::json::value spec, SubmitOptions options = {}) override;
  boost::asio::awaitable<JobHandle> async_submit(boost::json::value spec, SubmitOptions options = {}) override;
  JobSpec validate(const boost::json::value& spec) const override;  // the light checks, then the generic fields
  JobSpec admit(boost::json::value& spec) const override;           // validate, the job's images and video
  std::optional<JobHandle> find(const std::string& id) const override;
  // A running job's video relayed from the worker that encodes it (api/fleet/live_relay.hpp);
  // nullptr for a job unknown here or ended. Never waits on the broker (the subscription is made
  // on executor()).
  std::shared_ptr<LiveBroadcast> live_stream(const std::string& id) const override;
  std::vector<JobHandle> unfinished() const override;
  JobPage list_jobs(const JobListQuery& query) const override;  // the records this client follows
  bool previews(const std::string& model = {}) const override;  // false: workers send no preview images
  bool cancel(const std::string& id, std::string reason = "cancelled by request") override;
  const RuntimeConfig& config() const override;
  std::string metrics_text() const override;
  boost::asio::any_io_executor executor() const override;  // a two-thread pool of its own
  bool submit_is_remote() const override { return true; }   // HttpApi submits on executor()
  Tracer& tracer() const override;  // an empty timeline: the work happens on the workers
  FleetClientStats stats() const;
  // Whether the bucket watch has delivered every record that existed when the client started.
  bool caught_up() const;
  // Waits (up to `timeout`) until caught_up(); returns it.
  bool wait_caught_up(std::chrono::milliseconds timeout) const;
  // The fleet's rerun rule (api/batch.hpp): whether `path` (this client's view of the shared
  // output storage) holds the output of a done job of exactly this spec: the newest done record
  // in the bucket with an equal spec names a file of that name, the file has the size that
  // worker recorded, and an mp4/webm carries the content key it recorded in its tag. Records
  // expire after queue.record_ttl: later the job is rendered again. Blocks until caught up
  // (at most the connect timeout) and while probing the file.
  bool has_output(const boost::json::value& spec, const std::filesystem::path& path) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace vgen
