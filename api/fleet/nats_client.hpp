// NatsClient: a connection to a NATS server with JetStream, in RAII types over the nats.c
// library (libnats 3.4): streams, durable pull consumers, messages with explicit acks, key-value
// buckets, and push subscriptions whose handler runs on a nats.c thread.
//
//   NatsClient nats({.url = "nats://127.0.0.1:4222", .name = "vgen-worker-1"});
//   nats.ensure_stream({.name = "VGEN_JOBS", .subjects = {"vgen.jobs.>"}, .max_msgs = 1000});
//   nats.ensure_consumer({.stream = "VGEN_JOBS", .durable = "w-tiny", .filter = "vgen.jobs.tiny"});
//   auto pull = nats.pull_subscribe("VGEN_JOBS", "w-tiny", "vgen.jobs.tiny");
//   for (auto& m : pull.fetch(2, 5s)) { ...; m.ack(); }
//
// Ownership: NatsClient owns the connection and the JetStream context; a PullSubscription, a
// Subscription or a Message must not outlive the NatsClient that made it. Every type is
// move-only and releases what it holds in its destructor (a Message never acked is simply
// redelivered after the consumer's ack wait: that is how a crashed worker's job comes back).
// Threads: nats.c runs its own threads (reader, flusher, reconnect, and one per async
// subscription). Handlers given to subscribe()/watch() run there: they must only post to an
// executor (Asio) and return, never block. Every member may be called from any thread.
// Blocking: ensure_*, publish, kv_*, fetch and ack_sync are round trips to the server and block
// the calling thread (up to Options::timeout, fetch up to its own timeout): call them from a
// worker thread, never from an io thread. ack, nak, in_progress, term and publish_core only
// queue bytes for the flusher and do not wait.
// Errors: Error(transient) when the server cannot be reached or does not answer in time (the
// connection reconnects on its own, forever, every reconnect_wait), Error(overloaded) when a
// stream at its limit refuses a publish, Error(invalid_argument) for a URL nats.c rejects,
// Error(internal) for other server refusals; each message says what and where.
// Cancellation: none inside a call; fetch returns at its timeout (a server-side long poll, no
// busy polling) or as soon as messages are there.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct __natsConnection;
struct __natsSubscription;
struct __natsMsg;
struct __jsCtx;
struct __kvStore;

namespace vgen {

struct StreamSpec {
  std::string name;
  std::vector<std::string> subjects;
  std::int64_t max_msgs = -1;            // -1: unlimited; else publishes beyond it are refused
  bool work_queue = true;                // an acked message is removed (work-queue retention)
  std::int64_t max_bytes = -1;           // -1: unlimited; else publishes beyond it are refused
  std::chrono::seconds max_age{0};       // 0: messages never expire
};

struct ConsumerSpec {
  std::string stream, durable, filter;
  std::chrono::milliseconds ack_wait{60000};
  int max_deliver = -1;                  // -1: unlimited
  std::vector<std::chrono::milliseconds> backoff;  // redelivery delays (the last repeats); sets the ack wait
  int max_ack_pending = 1000;            // unacked messages the consumer hands out at most
};

class NatsMessage {
 public:
  NatsMessage() = default;
  explicit NatsMessage(__natsMsg* msg) : msg_(msg) {}
  NatsMessage(NatsMessage&& other) noexcept : msg_(std::exchange(other.msg_, nullptr)) {}
  NatsMessage& operator=(NatsMessage&& other) noexcept;
  ~NatsMessage();

  std::string subject() const;
  std::string data() const;
  std::uint64_t deliveries() const;  // 1 on the first delivery (JetStream metadata); 0 if none
  std::uint64_t stream_sequence() const;
  void ack();                        // done: the stream removes it
  void ack_sync();                   // the same, waiting for the server to confirm
  void nak(std::chrono::milliseconds delay = {});  // redeliver (after delay)
  void in_progress();                // still working: restarts the ack wait
  void term();                       // never redeliver
  explicit operator bool() const noexcept { return msg_ != nullptr; }

 private:
  __natsMsg* msg_ = nullptr;
};

class PullSubscription {
 public:
  PullSubscription() = default;
  explicit PullSubscription(__natsSubscription* sub) : sub_(sub) {}
  PullSubscription(PullSubscription&& other) noexcept : sub_(std::exchange(other.sub_, nullptr)) {}
  PullSubscription& operator=(PullSubscription&& other) noexcept;
  ~PullSubscription();
  // Up to `batch` messages; empty when none came within `timeout`. Error(transient) while the
  // server is unreachable.
  std::vector<NatsMessage> fetch(int batch, std::chrono::milliseconds timeout);
  // Up to `batch` of the messages waiting now, answered within about kShortFetch when none is
  // (a fetch with a short expiry; nats.c 3.4's no-wait request waited its whole expiry instead:
  // tests/api/fleet/test_nats_client.cpp). Errors as fetch.
  static constexpr std::chrono::milliseconds kShortFetch{100};
  std::vector<NatsMessage> fetch_now(int batch);

 private:
  __natsSubscription* sub_ = nullptr;
};

// A push subscription; unsubscribes in its destructor, after which the handler is not called.
class Subscription {
 public:
  using Handler = std::function<void(std::string subject, std::string data)>;
  Subscription();
  Subscription(Subscription&& other) noexcept;
  Subscription& operator=(Subscription&& other) noexcept;
  ~Subscription();

 private:
  friend class NatsClient;
  struct State;
  std::unique_ptr<State> state_;
};

class NatsClient {
 public:
  struct Options {
    std::string url;      // nats://host:port (comma-separated for several servers)
    std::string name;     // shown by the server's monitoring
    std::chrono::milliseconds timeout{5000};         // connect and request timeout
    std::chrono::milliseconds reconnect_wait{250};
  };
  explicit NatsClient(Options options);
  ~NatsClient();
  NatsClient(const NatsClient&) = delete;
  NatsClient& operator=(const NatsClient&) = delete;

  const Options& options() const noexcept { return options_; }
  bool connected() const;

  // Creates the stream or consumer unless one of that name exists (which is kept as it is).
  void ensure_stream(const StreamSpec& spec);
  void ensure_consumer(const ConsumerSpec& spec);
  // Messages of a stream waiting for a consumer's ack (delivered, not yet acked or not yet delivered).
  std::uint64_t stream_messages(const std::string& stream);
  PullSubscription pull_subscribe(const std::string& stream, const std::string& durable, const std::string& filter);

  // Publishes to a stream and waits for the server's ack; returns the stream sequence.
  std::uint64_t publish(const std::string& subject, std::string_view data);
  void publish_core(const std::string& subject, std::string_view data);  // no ack, no wait
  void flush();  // waits until the server has everything published so far

  // Key-value buckets. ensure_bucket keeps an existing one; ttl 0: entries never expire.
  void ensure_bucket(const std::string& bucket, std::chrono::seconds ttl = {}, int history = 1);
  std::uint64_t kv_put(const std::string& bucket, const std::string& key, std::string_view value);
  // A put without waiting for the ack (progress); lost if the server is away at that moment.
  void kv_put_nowait(const std::string& bucket, const std::string& key, std::string_view value);
  std::optional<std::string> kv_get(const std::string& bucket, const std::string& key);
  void kv_delete(const std::string& bucket, const std::string& key);

  // Core subscription (no persistence): `subject` may end in a wildcard.
  Subscription subscribe(const std::string& subject, Subscription::Handler handler);
  // Every current entry of a bucket (its last value per key), then each update as it is put:
  // an ordered consumer, replayed from the start again after a reconnect where it had a gap.
  // The handler gets the key and the value (empty for a deleted key).
  Subscription watch_bucket(const std::string& bucket, Subscription::Handler handler);
  // Every message of `stream` on `subject`, from its first, then each one as it is published: an
  // ordered consumer (no acks; the server forgets it with the subscription). The handler gets
  // the subject and the data, in stream order.
  Subscription replay(const std::string& stream, const std::string& subject, Subscription::Handler handler);

 private:
  __kvStore* bucket(const std::string& name);
  Options options_;
  __natsConnection* conn_ = nullptr;
  __jsCtx* js_ = nullptr;
  struct Buckets;
  std::unique_ptr<Buckets> buckets_;
};

}  // namespace vgen
