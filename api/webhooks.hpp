// Webhooks: the service's outbound side. When a job ends its event ("video.completed",
// "video.failed", "video.cancelled"; OpenAI's payload shape {"id": "evt_...", "object": "event",
// "type", "created_at", "data": {"id": <job id>}}) is sent to every configured endpoint that
// wants its type (api/webhook_options.hpp), signed per Standard Webhooks
// (api/webhook_signature.hpp), at least once:
// - record() writes one row per endpoint to the outbox (api/webhook_outbox.hpp) and fsyncs it
//   before anything is sent; the Runtime calls it before it records the job's end, so a crash
//   in between loses nothing (the event id is the job's, "evt_<job id>": a job that ends again
//   after a resume adds nothing). wake() then lets the new rows go out.
// - A delivery is retried with backoff and jitter until a 2xx or its max age
//   (api/webhook_retry.hpp); a new Webhooks over the same outbox resends what is still pending,
//   with the same webhook-id.
// - Requests: http:// only, to configured URLs only; a connect timeout, then one for the whole
//   exchange; no redirect is followed (a 3xx is a failed attempt); only the status line and
//   headers are read (at most 16 KiB); at most `concurrency` requests per endpoint in flight.
//   Everything runs on one thread of its own (its io_context), so a slow, hanging or hostile
//   receiver costs that thread sockets and timers, never an io thread of the API or a job.
// The fleet: the front end that accepted a job sends its event, not the worker. A worker's
// Runtime also ends (cancelled) the jobs it hands back when it stops, and never sees those a
// worker ends without running; the bucket's final record is the one truth. So a front end
// (api/fleet/fleet_client.hpp) watch()es each job it submits, durably, before the job exists
// anywhere else, and record_watched() its end when the bucket shows it, after a restart too
// (the watch replays every record); `vgen worker` ignores the endpoints (with a warning).
// Metrics (the registry given): vgen_webhook_deliveries_total{endpoint,result} (delivered,
// failed_attempt, expired), vgen_webhook_pending{endpoint}, vgen_webhook_in_flight{endpoint}.
// Thread-safety: record() and wake() from any thread (record() blocks on the outbox's fsync:
// call it off the io threads); stats() from any thread.
// Lifetime/cancellation: the destructor stops the thread at once; requests in flight are
// abandoned and stay pending in the outbox, to be resent by the next process.
#pragma once

#include "api/webhook_options.hpp"
#include "api/webhook_outbox.hpp"
#include "runtime/job.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace vgen {

class MetricsRegistry;

struct WebhookEvent {
  std::string id;          // "evt_..."; the webhook-id header
  std::string type;        // one of kWebhookEventTypes
  std::string subject_id;  // data.id: the job's id
  std::int64_t created_at = 0;
};
// A job's end as an event: "evt_<job id>" (the same id whichever process sends it, and however
// often the job ends: a resumed job's second end is the same event), video.completed, .failed or
// .cancelled, created now.
WebhookEvent job_end_event(const std::string& job_id, JobState state);
// The JSON body sent (and signed) for an event.
std::string webhook_body(const WebhookEvent& event);

struct WebhookStats {
  std::uint64_t delivered = 0, failed_attempts = 0, expired = 0;
  std::size_t pending = 0, in_flight = 0;
};

class Webhooks {
 public:
  // Opens `outbox` (options.outbox is ignored here: the Runtime resolves it), checks every
  // endpoint's URL and secret (Error(invalid_argument) naming it), loads the pending
  // deliveries and starts sending them. `metrics` must outlive this.
  // `on_attempt` (optional) sees each delivery once its attempt is written to the outbox and
  // counted in stats() (its state: delivered, pending with the next attempt's time, or expired),
  // on the sender's thread, before the endpoint's room is freed: it must not block. For logs and tests.
  using AttemptObserver = std::function<void(const WebhookDelivery&)>;
  Webhooks(WebhookOptions options, const std::filesystem::path& outbox, MetricsRegistry& metrics, AttemptObserver on_attempt = {});
  ~Webhooks();
  Webhooks(const Webhooks&) = delete;
  Webhooks& operator=(const Webhooks&) = delete;

  // Durably records the event for each endpoint that wants its type; they are sent after the
  // next wake(). Returns how many deliveries were new. Blocks on the file; throws its errors.
  std::size_t record(const WebhookEvent& event);
  // A subject whose end this process must announce although it does not run it: watch() (blocks
  // on the file) before the job exists anywhere else; record_watched() records its event only
  // if it is watched, then ends the watch (0 for a subject not watched: another front end's
  // job, or one already recorded); unwatch() for a submission that was refused.
  void watch(const std::string& subject_id);
  void unwatch(const std::string& subject_id);
  std::size_t record_watched(const WebhookEvent& event);
  // Starts sending what record() added.
  void wake();
  WebhookStats stats() const;
  const std::filesystem::path& outbox() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vgen
