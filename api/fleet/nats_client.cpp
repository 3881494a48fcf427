#include "api/fleet/nats_client.hpp"

#include "runtime/errors.hpp"

#include <nats/nats.h>

#include <map>
#include <mutex>

namespace vgen {

namespace {

std::string last_error(natsStatus s) {
  natsStatus ignored;
  const char* text = nats_GetLastError(&ignored);
  return std::string(natsStatus_GetText(s)) + (text && *text ? std::string(" (") + text + ")" : "");
}

// Connection-level failures are worth retrying (the client reconnects); the rest are refusals.
[[noreturn]] void fail(natsStatus s, jsErrCode jerr, const std::string& what) {
  const auto text = what + ": " + last_error(s) + (jerr ? " [jetstream error " + std::to_string(jerr) + "]" : "");
  // A stream at its limit (discard new): nats.c 3.4 leaves the error code unset on a publish,
  // so the server's words are what tells it.
  if (jerr == JSStreamStoreFailedErr || text.find("maximum messages") != std::string::npos ||
      text.find("maximum bytes") != std::string::npos)
    throw_error(ErrorKind::overloaded, text);
  switch (s) {
    case NATS_INVALID_ARG:
      throw_error(ErrorKind::invalid_argument, text);
    case NATS_TIMEOUT:
    case NATS_NO_SERVER:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NO_RESPONDERS:
    case NATS_IO_ERROR:
    case NATS_STALE_CONNECTION:
      throw_error(ErrorKind::transient, text);
    default:
      throw_error(ErrorKind::internal, text);
  }
}

void check(natsStatus s, const std::string& what, jsErrCode jerr = static_cast<jsErrCode>(0)) {
  if (s != NATS_OK) fail(s, jerr, what);
}

std::int64_t nanos(std::chrono::milliseconds ms) { return static_cast<std::int64_t>(ms.count()) * 1000000; }

std::vector<const char*> c_strings(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  for (const auto& s : v) out.push_back(s.c_str());
  return out;
}

}  // namespace

// ---- NatsMessage ----

NatsMessage& NatsMessage::operator=(NatsMessage&& other) noexcept {
  if (this != &other) {
    if (msg_) natsMsg_Destroy(msg_);
    msg_ = std::exchange(other.msg_, nullptr);
  }
  return *this;
}

NatsMessage::~NatsMessage() {
  if (msg_) natsMsg_Destroy(msg_);
}

std::string NatsMessage::subject() const { return natsMsg_GetSubject(msg_); }

std::string NatsMessage::data() const {
  return std::string(natsMsg_GetData(msg_), static_cast<std::size_t>(natsMsg_GetDataLength(msg_)));
}

std::uint64_t NatsMessage::deliveries() const {
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, msg_) != NATS_OK) return 0;
  const auto n = meta->NumDelivered;
  jsMsgMetaData_Destroy(meta);
  return n;
}

std::uint64_t NatsMessage::stream_sequence() const { return natsMsg_GetSequence(msg_); }

// Acks are best effort on purpose: one that is lost makes the server redeliver, which the
// fleet handles as it handles a crash (an idempotent rewrite of the same output).
void NatsMessage::ack() { natsMsg_Ack(msg_, nullptr); }
void NatsMessage::ack_sync() { check(natsMsg_AckSync(msg_, nullptr, nullptr), "ack"); }
void NatsMessage::nak(std::chrono::milliseconds delay) {
  if (delay.count() > 0) natsMsg_NakWithDelay(msg_, delay.count(), nullptr);
  else natsMsg_Nak(msg_, nullptr);
}
void NatsMessage::in_progress() { natsMsg_InProgress(msg_, nullptr); }
void NatsMessage::term() { natsMsg_Term(msg_, nullptr); }

// ---- PullSubscription ----

PullSubscription& PullSubscription::operator=(PullSubscription&& other) noexcept {
  if (this != &other) {
    if (sub_) natsSubscription_Destroy(sub_);
    sub_ = std::exchange(other.sub_, nullptr);
  }
  return *this;
}

PullSubscription::~PullSubscription() {
  if (sub_) natsSubscription_Destroy(sub_);  // the durable consumer stays; its unacked messages come back
}

namespace {

std::vector<NatsMessage> take(natsMsgList& list) {
  std::vector<NatsMessage> out;
  for (int i = 0; i < list.Count; ++i) {
    out.emplace_back(list.Msgs[i]);
    list.Msgs[i] = nullptr;  // owned by `out` now
  }
  natsMsgList_Destroy(&list);
  return out;
}

}  // namespace

std::vector<NatsMessage> PullSubscription::fetch(int batch, std::chrono::milliseconds timeout) {
  natsMsgList list{};
  jsErrCode jerr{};
  const auto s = natsSubscription_Fetch(&list, sub_, batch, timeout.count(), &jerr);
  auto out = take(list);
  if (s == NATS_OK || s == NATS_TIMEOUT) return out;
  if (!out.empty()) return out;
  fail(s, jerr, "fetch");
}

std::vector<NatsMessage> PullSubscription::fetch_now(int batch) { return fetch(batch, kShortFetch); }

// ---- Subscription ----

struct Subscription::State {
  Handler handler;
  natsSubscription* sub = nullptr;
  ~State() {
    if (!sub) return;
    // Drained, not just unsubscribed: a handler running on a nats.c thread returns before
    // `handler` is destroyed (it only posts, so this waits at most for one post).
    if (natsSubscription_Drain(sub) == NATS_OK) natsSubscription_WaitForDrainCompletion(sub, 5000);
    natsSubscription_Destroy(sub);
  }
};

Subscription::Subscription() = default;
Subscription::Subscription(Subscription&& other) noexcept = default;
Subscription& Subscription::operator=(Subscription&& other) noexcept = default;
Subscription::~Subscription() = default;

namespace {

void on_message(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* state = static_cast<Subscription::Handler*>(closure);
  std::string subject = natsMsg_GetSubject(msg);
  std::string data(natsMsg_GetData(msg), static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
  natsMsg_Destroy(msg);
  (*state)(std::move(subject), std::move(data));
}

// A bucket's entries arrive on "$KV.<bucket>.<key>"; delete and purge markers carry no value.
void on_bucket_entry(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* handler = static_cast<Subscription::Handler*>(closure);
  const char* op = nullptr;
  const bool removed = natsMsgHeader_Get(msg, "KV-Operation", &op) == NATS_OK && op != nullptr;
  std::string subject = natsMsg_GetSubject(msg);
  std::string data(natsMsg_GetData(msg), static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
  natsMsg_Destroy(msg);
  if (removed) data.clear();  // a deleted or purged key: an empty value
  const auto key_at = subject.find('.', subject.find('.') + 1);  // after "$KV.<bucket>."
  (*handler)(subject.substr(key_at + 1), std::move(data));
}

}  // namespace

// ---- NatsClient ----

struct NatsClient::Buckets {
  std::mutex mutex;
  std::map<std::string, kvStore*> open;
  ~Buckets() {
    for (auto& [_, kv] : open) kvStore_Destroy(kv);
  }
};

NatsClient::NatsClient(Options options) : options_(std::move(options)), buckets_(std::make_unique<Buckets>()) {
  natsOptions* opts = nullptr;
  check(natsOptions_Create(&opts), "nats options");
  struct Release {
    natsOptions* o;
    ~Release() { natsOptions_Destroy(o); }
  } release{opts};
  if (natsOptions_SetURL(opts, options_.url.c_str()) != NATS_OK)
    throw_error(ErrorKind::invalid_argument, "queue: '" + options_.url + "' is not a NATS URL (nats://HOST:PORT)");
  if (!options_.name.empty()) natsOptions_SetName(opts, options_.name.c_str());
  natsOptions_SetTimeout(opts, options_.timeout.count());
  natsOptions_SetMaxReconnect(opts, -1);  // a broker restart is waited out, never fatal
  natsOptions_SetReconnectWait(opts, options_.reconnect_wait.count());
  natsOptions_SetReconnectBufSize(opts, 8 << 20);  // publishes made while reconnecting are kept
  const auto s = natsConnection_Connect(&conn_, opts);
  if (s != NATS_OK) fail(s, {}, "cannot connect to the queue at " + options_.url);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = options_.timeout.count();
  if (const auto js = natsConnection_JetStream(&js_, conn_, &jo); js != NATS_OK) {
    natsConnection_Destroy(conn_);
    fail(js, {}, "JetStream at " + options_.url);
  }
}

NatsClient::~NatsClient() {
  buckets_.reset();
  jsCtx_Destroy(js_);
  natsConnection_FlushTimeout(conn_, options_.timeout.count());  // acks and puts queued so far
  natsConnection_Close(conn_);
  natsConnection_Destroy(conn_);
}

bool NatsClient::connected() const { return natsConnection_Status(conn_) == NATS_CONN_STATUS_CONNECTED; }

void NatsClient::ensure_stream(const StreamSpec& spec) {
  jsStreamInfo* info = nullptr;
  jsErrCode jerr{};
  auto s = js_GetStreamInfo(&info, js_, spec.name.c_str(), nullptr, &jerr);
  if (s == NATS_OK) {
    jsStreamInfo_Destroy(info);
    return;
  }
  if (s != NATS_NOT_FOUND) fail(s, jerr, "stream " + spec.name);
  auto subjects = c_strings(spec.subjects);
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = spec.name.c_str();
  cfg.Subjects = subjects.data();
  cfg.SubjectsLen = static_cast<int>(subjects.size());
  cfg.Retention = spec.work_queue ? js_WorkQueuePolicy : js_LimitsPolicy;
  cfg.MaxMsgs = spec.max_msgs;
  cfg.MaxBytes = spec.max_bytes;
  cfg.MaxAge = std::chrono::duration_cast<std::chrono::nanoseconds>(spec.max_age).count();
  cfg.Discard = js_DiscardNew;  // at the limit a publish is refused (HTTP 429), nothing is dropped
  cfg.Storage = js_FileStorage;
  s = js_AddStream(&info, js_, &cfg, nullptr, &jerr);
  if (s == NATS_OK) jsStreamInfo_Destroy(info);
  else if (jerr != JSStreamNameExistErr) fail(s, jerr, "creating stream " + spec.name);  // another process won the race
}

void NatsClient::ensure_consumer(const ConsumerSpec& spec) {
  jsConsumerInfo* info = nullptr;
  jsErrCode jerr{};
  auto s = js_GetConsumerInfo(&info, js_, spec.stream.c_str(), spec.durable.c_str(), nullptr, &jerr);
  if (s == NATS_OK) {
    jsConsumerInfo_Destroy(info);
    return;
  }
  if (s != NATS_NOT_FOUND) fail(s, jerr, "consumer " + spec.durable);
  std::vector<std::int64_t> backoff;
  for (auto d : spec.backoff) backoff.push_back(nanos(d));
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = spec.durable.c_str();
  cc.FilterSubject = spec.filter.c_str();
  cc.AckPolicy = js_AckExplicit;
  cc.AckWait = nanos(spec.ack_wait);
  cc.MaxDeliver = spec.max_deliver;
  cc.MaxAckPending = spec.max_ack_pending;
  if (!backoff.empty()) {
    cc.BackOff = backoff.data();
    cc.BackOffLen = static_cast<int>(backoff.size());
  }
  s = js_AddConsumer(&info, js_, spec.stream.c_str(), &cc, nullptr, &jerr);
  if (s == NATS_OK) jsConsumerInfo_Destroy(info);
  else if (jerr != JSConsumerNameExistErr && jerr != JSConsumerExistingActiveErr)
    fail(s, jerr, "creating consumer " + spec.durable);
}

std::uint64_t NatsClient::stream_messages(const std::string& stream) {
  jsStreamInfo* info = nullptr;
  jsErrCode jerr{};
  check(js_GetStreamInfo(&info, js_, stream.c_str(), nullptr, &jerr), "stream " + stream, jerr);
  const auto n = info->State.Msgs;
  jsStreamInfo_Destroy(info);
  return n;
}

PullSubscription NatsClient::pull_subscribe(const std::string& stream, const std::string& durable,
                                            const std::string& filter) {
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  so.Consumer = durable.c_str();  // bind to the durable ensure_consumer made: many workers share it
  natsSubscription* sub = nullptr;
  jsErrCode jerr{};
  check(js_PullSubscribe(&sub, js_, filter.c_str(), durable.c_str(), nullptr, &so, &jerr), "pull " + durable, jerr);
  return PullSubscription(sub);
}

std::uint64_t NatsClient::publish(const std::string& subject, std::string_view data) {
  jsPubAck* ack = nullptr;
  jsErrCode jerr{};
  check(js_Publish(&ack, js_, subject.c_str(), data.data(), static_cast<int>(data.size()), nullptr, &jerr),
        "publish to " + subject, jerr);
  const auto seq = ack->Sequence;
  jsPubAck_Destroy(ack);
  return seq;
}

void NatsClient::publish_core(const std::string& subject, std::string_view data) {
  check(natsConnection_Publish(conn_, subject.c_str(), data.data(), static_cast<int>(data.size())), "publish " + subject);
}

void NatsClient::flush() { check(natsConnection_FlushTimeout(conn_, options_.timeout.count()), "flush"); }

void NatsClient::ensure_bucket(const std::string& name, std::chrono::seconds ttl, int history) {
  kvStore* kv = nullptr;
  auto s = js_KeyValue(&kv, js_, name.c_str());
  if (s == NATS_NOT_FOUND) {
    kvConfig cfg;
    kvConfig_Init(&cfg);
    cfg.Bucket = name.c_str();
    cfg.History = static_cast<uint8_t>(history);
    cfg.TTL = nanos(std::chrono::duration_cast<std::chrono::milliseconds>(ttl));
    cfg.StorageType = js_FileStorage;
    s = js_CreateKeyValue(&kv, js_, &cfg);
  }
  check(s, "key-value bucket " + name);
  std::lock_guard lock(buckets_->mutex);
  auto [it, added] = buckets_->open.emplace(name, kv);
  if (!added) kvStore_Destroy(kv);
}

kvStore* NatsClient::bucket(const std::string& name) {
  std::lock_guard lock(buckets_->mutex);
  auto it = buckets_->open.find(name);
  if (it != buckets_->open.end()) return it->second;
  kvStore* kv = nullptr;
  check(js_KeyValue(&kv, js_, name.c_str()), "key-value bucket " + name);
  return buckets_->open.emplace(name, kv).first->second;
}

std::uint64_t NatsClient::kv_put(const std::string& name, const std::string& key, std::string_view value) {
  std::uint64_t rev = 0;
  check(kvStore_Put(&rev, bucket(name), key.c_str(), value.data(), static_cast<int>(value.size())),
        "put " + name + "/" + key);
  return rev;
}

void NatsClient::kv_put_nowait(const std::string& name, const std::string& key, std::string_view value) {
  publish_core("$KV." + name + "." + key, value);  // the bucket's stream stores it; nobody waits for the ack
}

void NatsClient::kv_delete(const std::string& name, const std::string& key) {
  check(kvStore_Delete(bucket(name), key.c_str()), "delete " + name + "/" + key);
}

std::optional<std::string> NatsClient::kv_get(const std::string& name, const std::string& key) {
  kvEntry* e = nullptr;
  const auto s = kvStore_Get(&e, bucket(name), key.c_str());
  if (s == NATS_NOT_FOUND) return std::nullopt;
  check(s, "get " + name + "/" + key);
  std::string value(static_cast<const char*>(kvEntry_Value(e)), static_cast<std::size_t>(kvEntry_ValueLen(e)));
  kvEntry_Destroy(e);
  return value;
}

Subscription NatsClient::subscribe(const std::string& subject, Subscription::Handler handler) {
  Subscription out;
  out.state_ = std::make_unique<Subscription::State>();
  out.state_->handler = std::move(handler);
  check(natsConnection_Subscribe(&out.state_->sub, conn_, subject.c_str(), on_message, &out.state_->handler),
        "subscribe " + subject);
  return out;
}

namespace {

// An ordered push consumer on `stream` (nats.c's own: no durable state on the broker, gaps
// re-created by the library) from `policy`'s first message, each message to `on(closure)`.
natsSubscription* subscribe_ordered(jsCtx* js, const std::string& stream, const std::string& subject, jsDeliverPolicy policy,
                                    natsMsgHandler on, void* closure, const std::string& what) {
  natsSubscription* sub = nullptr;
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  so.Ordered = true;
  so.Config.DeliverPolicy = policy;
  jsErrCode jerr{};
  check(js_Subscribe(&sub, js, subject.c_str(), on, closure, nullptr, &so, &jerr), what, jerr);
  return sub;
}

}  // namespace

Subscription NatsClient::watch_bucket(const std::string& name, Subscription::Handler handler) {
  Subscription out;
  out.state_ = std::make_unique<Subscription::State>();
  out.state_->handler = std::move(handler);
  out.state_->sub = subscribe_ordered(js_, "KV_" + name, "$KV." + name + ".>", js_DeliverLastPerSubject, on_bucket_entry,
                                      &out.state_->handler, "watch " + name);
  return out;
}

Subscription NatsClient::replay(const std::string& stream, const std::string& subject, Subscription::Handler handler) {
  Subscription out;
  out.state_ = std::make_unique<Subscription::State>();
  out.state_->handler = std::move(handler);
  out.state_->sub = subscribe_ordered(js_, stream, subject, js_DeliverAll, on_message, &out.state_->handler, "replay " + subject);
  return out;
}

}  // namespace vgen
