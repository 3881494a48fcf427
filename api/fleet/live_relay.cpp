#include "api/fleet/live_relay.hpp"

#include "api/fleet/nats_client.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <boost/asio/this_coro.hpp>

#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

namespace vgen {

namespace asio = boost::asio;
using End = LiveBroadcast::End;

namespace {

const char* end_name(End how) {
  switch (how) {
    case End::complete: return "complete";
    case End::truncated: return "truncated";
    default: return "failed";
  }
}

End end_named(std::string_view name) {
  if (name == "complete") return End::complete;
  if (name == "truncated") return End::truncated;
  return End::failed;
}

void log_failure(std::exception_ptr e, const std::string& what) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    spdlog::warn("{}: {}", what, x.what());
  }
}

}  // namespace

std::string live_stream_name(const QueueConfig& queue) { return queue.stream + "_LIVE"; }
std::string live_data_subject(const QueueConfig& queue, const std::string& id) {
  return queue.subject_prefix + "_live.data." + id;
}
std::string live_want_subject(const QueueConfig& queue, const std::string& id) {
  return queue.subject_prefix + "_live.want." + id;
}

bool ensure_live_stream(NatsClient& nats, const QueueConfig& queue) {
  try {
    nats.ensure_stream({.name = live_stream_name(queue),
                        .subjects = {live_data_subject(queue, ">")},
                        .work_queue = false,
                        .max_bytes = kLiveMaxBytes,
                        .max_age = kLiveMaxAge});
    return true;
  } catch (const Error& e) {
    spdlog::warn("fleet: no live video in this process: the broker refused the stream {}: {}", live_stream_name(queue), e.what());
    return false;
  }
}

// ---- the worker's side ----

struct LiveRelay::State {
  NatsClient& nats;
  QueueConfig queue;
  std::string worker;
  asio::thread_pool pool{1};  // the publishing thread: it waits for the broker's acks
  const std::chrono::steady_clock::duration remember_for;
  mutable std::mutex mutex;
  std::set<std::string> relayed;  // job ids relaying, or ended within remember_for
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> ended;  // oldest first
  std::size_t ended_count = 0;
  bool stopped = false;

  State(NatsClient& n, QueueConfig q, std::string w, std::chrono::steady_clock::duration r)
      : nats(n), queue(std::move(q)), worker(std::move(w)), remember_for(r) {}

  void record_end(std::string id) {
    std::lock_guard lock(mutex);
    ended.emplace_back(std::chrono::steady_clock::now(), std::move(id));
    ++ended_count;
  }

  void forget_old_locked() {
    const auto now = std::chrono::steady_clock::now();
    while (!ended.empty() && now - ended.front().first >= remember_for) {
      relayed.erase(ended.front().second);
      ended.pop_front();
    }
  }

  void publish(const std::string& subject, char kind, std::string_view payload) {
    std::string message(1, kind);
    message.append(payload);
    nats.publish(subject, message);
  }

  // The broadcast as it grows, each segment in pieces the broker takes, then its end.
  asio::awaitable<void> relay_one(std::string id, std::shared_ptr<LiveBroadcast> live) {
    const auto subject = live_data_subject(queue, id);
    publish(subject, 'a', worker);
    std::size_t sent = 0;
    End end = End::open;
    while (end == End::open) {
      const auto read = co_await live->next(sent);
      for (const auto& segment : read.segments) {
        const std::string_view bytes(*segment);
        for (std::size_t at = 0; at < bytes.size(); at += kLivePiece) {
          const auto piece = bytes.substr(at, kLivePiece);
          publish(subject, at + piece.size() < bytes.size() ? 'p' : 's', piece);
        }
        ++sent;
      }
      end = read.end;
    }
    publish(subject, 'e', end_name(end));
    spdlog::debug("live relay of job {}: {} segment(s), {}", id, sent, end_name(end));
  }
};

LiveRelay::LiveRelay(NatsClient& nats, QueueConfig queue, std::string worker,
                     std::chrono::steady_clock::duration remember_for)
    : state_(std::make_shared<State>(nats, std::move(queue), std::move(worker), remember_for)) {
  if (!ensure_live_stream(nats, state_->queue)) state_->stopped = true;  // relays nothing: front ends serve the file
}

LiveRelay::~LiveRelay() { stop(); }

void LiveRelay::relay(const std::string& id, std::shared_ptr<LiveBroadcast> live) {
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopped) return;
    state_->forget_old_locked();
    if (!state_->relayed.insert(id).second) return;
  }
  spdlog::info("live relay of job {}: relaying its video to the front ends", id);  // tests wait for this line
  asio::co_spawn(state_->pool, state_->relay_one(id, std::move(live)), [id, weak = std::weak_ptr<State>(state_)](std::exception_ptr e) {
    log_failure(e, "live relay of job " + id + " stopped");
    if (auto state = weak.lock()) state->record_end(id);  // ended or failed: remembered for remember_for from now
  });
}

std::size_t LiveRelay::remembered() const {
  std::lock_guard lock(state_->mutex);
  return state_->relayed.size();
}

std::size_t LiveRelay::ended() const {
  std::lock_guard lock(state_->mutex);
  return state_->ended_count;
}

void LiveRelay::stop() {
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopped) return;
    state_->stopped = true;
  }
  state_->pool.stop();
  state_->pool.join();
}

// ---- the front end's side ----

struct LiveReplay::State : std::enable_shared_from_this<LiveReplay::State> {
  NatsClient& nats;
  QueueConfig queue;
  std::string id;
  std::shared_ptr<LiveBroadcast> live;
  Subscription messages;
  std::mutex mutex;
  std::string partial;     // pieces of the segment being received
  bool answered = false;   // a worker said it relays the job
  std::optional<std::chrono::steady_clock::time_point> job_ended_at;

  State(NatsClient& n, QueueConfig q, std::string i, std::size_t max_bytes, std::shared_ptr<LiveBudget> budget)
      : nats(n), queue(std::move(q)), id(std::move(i)), live(std::make_shared<LiveBroadcast>(max_bytes, std::move(budget))) {}

  // On a nats.c thread: cheap (a copy into the broadcast, which never waits).
  void on_message(const std::string& data) {
    if (data.empty()) return;
    const std::string_view payload = std::string_view(data).substr(1);
    std::lock_guard lock(mutex);
    switch (data[0]) {
      case 'a': answered = true; break;
      case 'p': partial.append(payload); break;
      case 's':
        partial.append(payload);
        live->append(std::exchange(partial, std::string()));  // false once ended (a cap): the rest is dropped
        break;
      case 'e': live->finish(end_named(payload)); break;
      default: break;
    }
  }

  // Subscribes (a broker round trip: here, never on the HTTP route's io thread), asks for the
  // job until a worker answers, and ends a broadcast the job's end leaves open. Holds the state
  // (and so the subscription) until the broadcast has ended.
  asio::awaitable<void> keep(std::shared_ptr<State> self) {
    const auto executor = co_await asio::this_coro::executor;
    try {
      // The reference a message takes is let go on the executor, never here: were it the last
      // (the broadcast ended meanwhile), the State and its subscription would be destroyed on
      // the subscription's own delivery thread, whose drain waits for this very callback.
      messages = nats.replay(live_stream_name(queue), live_data_subject(queue, id),
                             [weak = std::weak_ptr<State>(self), executor](std::string, std::string data) {
                               if (auto s = weak.lock()) {
                                 s->on_message(data);
                                 asio::post(executor, [s = std::move(s)] {});
                               }
                             });
    } catch (const Error& e) {
      spdlog::warn("live replay of job {}: {}; its finished file is served instead", id, e.what());
      live->finish(End::failed);
      co_return;
    }
    asio::steady_timer timer(executor);
    while (live->end() == End::open) {
      bool ask = false;
      {
        std::lock_guard lock(mutex);
        if (job_ended_at) {
          if (!live->started() || std::chrono::steady_clock::now() - *job_ended_at >= kEndGrace) {
            live->finish(End::failed);  // nothing came: the route serves the file; or the relay died
            break;
          }
        } else {
          ask = !answered;
        }
      }
      if (ask) {
        try {
          nats.publish_core(live_want_subject(queue, id), "");
        } catch (const Error& e) {
          spdlog::debug("live replay of job {}: asking: {}", id, e.what());
        }
      }
      timer.expires_after(kAskEvery);
      co_await timer.async_wait(asio::use_awaitable);
    }
  }
};

std::shared_ptr<LiveReplay> LiveReplay::start(NatsClient& nats, const QueueConfig& queue, std::string id,
                                              asio::any_io_executor executor, std::size_t max_bytes,
                                              std::shared_ptr<LiveBudget> budget) {
  auto state = std::make_shared<State>(nats, queue, std::move(id), max_bytes, std::move(budget));
  asio::co_spawn(executor, state->keep(state), [id = state->id](std::exception_ptr e) {
    log_failure(e, "live replay of job " + id + " stopped");
  });
  return std::shared_ptr<LiveReplay>(new LiveReplay(std::move(state)));
}

LiveReplay::LiveReplay(std::shared_ptr<State> state) : state_(std::move(state)) {}
LiveReplay::~LiveReplay() = default;

const std::shared_ptr<LiveBroadcast>& LiveReplay::broadcast() const noexcept { return state_->live; }

void LiveReplay::job_ended() {
  std::lock_guard lock(state_->mutex);
  if (!state_->job_ended_at) state_->job_ended_at = std::chrono::steady_clock::now();
}

}  // namespace vgen
