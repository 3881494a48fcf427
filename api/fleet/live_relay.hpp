// Live video through the fleet (issue 32 item 4: `?live=1` on a front end's video routes): the
// fragmented MP4 a worker's encoder writes to a job's LiveBroadcast
// (stages/media/live_broadcast.hpp), carried through the broker to the front ends serving the job.
//
//   stream  <stream>_LIVE: limits retention, file storage; a message is kept at most
//           kLiveMaxAge and the stream holds at most kLiveMaxBytes: at that limit a publish is
//           refused (discard new), which ends that one relay (its readers keep what came) and
//           never drops bytes another relay published
//   data    <subject_prefix>_live.data.<job id>: the job's stream as messages of at most
//           kLivePiece bytes, each a kind byte and its payload:
//             'a' <worker>  the worker that holds the job relays it (the front end stops asking)
//             'p' <bytes>   a piece of a segment, more of the same segment follows
//             's' <bytes>   a segment's last (or only) piece
//             'e' <how>     the end: "complete", "failed" or "truncated"
//   want    <subject_prefix>_live.want.<job id> (core NATS): a front end asks the worker that
//           holds the job to relay it
// ("<subject_prefix>_live" is not under the job stream's "<subject_prefix>.>".)
//
// LiveRelay (a worker): relay() publishes one job's broadcast from its first segment to its
// end, once per job id. Publishing waits for the broker's acks, on the relay's own thread; the
// encoder never waits on it (LiveBroadcast::append does not wait), so a slow broker or a
// front end that went away costs the job nothing.
// LiveReplay (a front end): the job's broadcast rebuilt from the stream by an ordered consumer
// from the job's first message, capped as any LiveBroadcast (max_bytes and a shared budget: a
// cut ends it `truncated`). It asks for the job (want) every kAskEvery until a worker answers
// 'a' or the job ends. After the job's end (job_ended()) a broadcast that never began ends
// `failed` at once, so the HTTP route serves the finished file instead; one that began gets
// kEndGrace for its end message (the job's final record and the relay's last messages travel
// separately) and then ends `failed`.
// Known limit: a job redelivered after its worker died is relayed again on the same subject, so
// a replay that read part of the first encode goes on with the second encode's init segment
// and fragments appended (a broken stream for that client; the job's file is unaffected). A
// subject per attempt (<id>.<attempt>) would fix it; not built.
//
// Thread-safety: every member may be called from any thread. Blocking: the constructors make
// sure the stream exists (a broker round trip); relay() and job_ended() return at once.
// Lifetime: the NatsClient must outlive the relay / replay; a LiveRelay's destructor stops its
// thread (relays in flight end without their end message).
#pragma once

#include "api/fleet/fleet_queue.hpp"
#include "stages/media/live_broadcast.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace vgen {

class NatsClient;

inline constexpr std::size_t kLivePiece = 256 * 1024;
inline constexpr std::int64_t kLiveMaxBytes = std::int64_t{1} << 30;
inline constexpr std::chrono::seconds kLiveMaxAge{600};
inline constexpr std::chrono::milliseconds kAskEvery{250};
inline constexpr std::chrono::seconds kEndGrace{30};

std::string live_stream_name(const QueueConfig& queue);
std::string live_data_subject(const QueueConfig& queue, const std::string& id);
std::string live_want_subject(const QueueConfig& queue, const std::string& id);  // id "*": all
// Makes sure the live stream exists. False (logged as a warning) when the broker refuses it
// (e.g. its storage limits cannot hold kLiveMaxBytes): live video is then off in this process,
// and `?live=1` serves the finished file, as the rest of the fleet goes on.
bool ensure_live_stream(NatsClient& nats, const QueueConfig& queue);

class LiveRelay {
 public:
  // `remember_for`: how long a job id is remembered after its relay ended (a want for it then
  // does nothing); after that it is forgotten, so a long-lived worker holds the ids of the
  // relays of the last kLiveMaxAge only, not of every job it ever relayed. By then the stream
  // has dropped the relay's messages too, so a relay again (a job still held so long after its
  // broadcast ended: none in practice) would not double them for a reader.
  LiveRelay(NatsClient& nats, QueueConfig queue, std::string worker,
            std::chrono::steady_clock::duration remember_for = kLiveMaxAge);
  ~LiveRelay();
  LiveRelay(const LiveRelay&) = delete;
  LiveRelay& operator=(const LiveRelay&) = delete;

  // Publishes `live` (job `id`) until it ends; a second call for the same id does nothing.
  void relay(const std::string& id, std::shared_ptr<LiveBroadcast> live);
  // Job ids remembered now (relaying, or ended within remember_for; pruned on relay()).
  std::size_t remembered() const;
  std::size_t ended() const;  // relays finished so far (their end published, or failed)
  // Stops the thread; relays in flight end where they are. Idempotent.
  void stop();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

class LiveReplay {
 public:
  // Subscribes and starts asking; `executor` runs the asking timer.
  static std::shared_ptr<LiveReplay> start(NatsClient& nats, const QueueConfig& queue, std::string id,
                                           boost::asio::any_io_executor executor, std::size_t max_bytes,
                                           std::shared_ptr<LiveBudget> budget);
  ~LiveReplay();

  const std::shared_ptr<LiveBroadcast>& broadcast() const noexcept;
  // The job's final record was seen (see above).
  void job_ended();

  struct State;

 private:
  explicit LiveReplay(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace vgen
