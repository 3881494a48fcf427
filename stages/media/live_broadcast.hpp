// LiveBroadcast: one job's video as it is written (fragmented MP4: the init segment, then one
// segment per fragment), kept whole for the job's life so a client that joins late still gets
// every byte from the start, and handed to any number of readers as it grows. LiveStreams: the
// broadcasts of the jobs that have one, by job id.
//
// Who writes: the encoder (stages/media/fragment_tap.hpp) appends from its codec thread and the
// encode stage ends it; the Runtime ends and forgets a job's broadcast when the job ends. Who
// reads: the HTTP live route (api/http/live_video.hpp), one cursor per client.
// Never blocks the writer: append() copies the segment in and wakes readers by setting an
// AsyncEvent (the wake is posted to each reader's executor, never run inline). A reader costs
// the writer nothing: its state is an index into the shared segments, and the bytes it has yet
// to send are the broadcast's, not a copy per client. The whole is bounded twice: a broadcast
// that would pass its max_bytes, or take all the broadcasts of its LiveStreams past their
// shared LiveBudget (config live.max_total_bytes), ends `truncated` instead of growing; its
// readers get what was written and then that end, which the HTTP route turns into a broken
// response (no last chunk), so that a client can tell a cut stream from a whole one. The job's
// file is not affected. A broadcast gives its bytes back to the budget when it is destroyed
// (with its last reader).
//
// Thread-safety: every member may be called from any thread.
// Cancellation: next() waits on an AsyncEvent and fails with operation_aborted when cancelled
// (emit on the reader's strand: runtime/event.hpp). Nothing else waits.
// Lifetime: readers hold the broadcast by shared_ptr; LiveStreams drops its reference when the
// job ends, so the bytes go with the last reader.
#pragma once

#include "runtime/event.hpp"

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace vgen {

// The bytes all broadcasts of one LiveStreams may hold together. Thread-safe (atomic).
class LiveBudget {
 public:
  static constexpr std::size_t default_total_bytes = std::size_t{2} << 30;
  explicit LiveBudget(std::size_t total_bytes = default_total_bytes) : total_(total_bytes) {}
  // Takes n bytes if they fit (true), else takes nothing (false).
  bool try_take(std::size_t n);
  void give_back(std::size_t n);
  std::size_t used() const { return used_.load(); }
  std::size_t total() const noexcept { return total_; }

 private:
  const std::size_t total_;
  std::atomic<std::size_t> used_{0};
};

class LiveBroadcast {
 public:
  // truncated: a cap ended it (max_bytes or the budget) before the encoder was done.
  enum class End { open, complete, failed, truncated };
  static constexpr std::size_t default_max_bytes = std::size_t{512} << 20;

  // `budget` (may be null: none) is shared with the other broadcasts it bounds.
  explicit LiveBroadcast(std::size_t max_bytes = default_max_bytes, std::shared_ptr<LiveBudget> budget = nullptr);
  ~LiveBroadcast();
  LiveBroadcast(const LiveBroadcast&) = delete;
  LiveBroadcast& operator=(const LiveBroadcast&) = delete;

  // Adds a segment (empty ones are ignored). False, and nothing is added, once the broadcast
  // has ended; a segment that would pass max_bytes or the budget ends it as truncated (also
  // false).
  bool append(std::string segment);
  // Ends the broadcast (idempotent: the first end stays). Wakes every reader.
  void finish(End how);

  struct Read {
    std::vector<std::shared_ptr<const std::string>> segments;  // from the index asked for on
    End end = End::open;  // complete, failed or truncated: no segment follows those returned
  };
  // The segments from `index` on and the state, now (never waits).
  Read read_from(std::size_t index) const;
  // The same once there is a segment at `index` or the broadcast has ended.
  boost::asio::awaitable<Read> next(std::size_t index);

  bool started() const;  // a segment was appended
  End end() const;
  std::size_t bytes() const;

 private:
  const std::size_t max_bytes_;
  const std::shared_ptr<LiveBudget> budget_;
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<const std::string>> segments_;
  std::size_t bytes_ = 0;
  End end_ = End::open;
  std::shared_ptr<AsyncEvent> grown_ = std::make_shared<AsyncEvent>();  // set (and replaced) on each change
};

// The broadcasts by job id. open() is how both sides meet whichever comes first: a reader asking
// before the encoder starts gets the broadcast the encoder will write.
class LiveStreams {
 public:
  // max_bytes: each broadcast's cap; total_bytes: all of them together (LiveBudget).
  explicit LiveStreams(std::size_t max_bytes = LiveBroadcast::default_max_bytes,
                       std::size_t total_bytes = LiveBudget::default_total_bytes)
      : max_bytes_(max_bytes), budget_(std::make_shared<LiveBudget>(total_bytes)) {}
  // The job's broadcast, made if it has none.
  std::shared_ptr<LiveBroadcast> open(const std::string& id);
  // For the writer: the job's broadcast if a reader has opened one, else nullptr (a job nobody
  // watches is encoded exactly as without live streams). A fresh one when the current one has
  // bytes already (an encode run again after a failure), whose readers are ended (failed): a
  // stream never mixes two encodes.
  std::shared_ptr<LiveBroadcast> start(const std::string& id);
  // Ends the job's broadcast (failed unless it completed already) and forgets it.
  void close(const std::string& id);
  std::size_t size() const;
  const LiveBudget& budget() const noexcept { return *budget_; }

 private:
  const std::size_t max_bytes_;
  const std::shared_ptr<LiveBudget> budget_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<LiveBroadcast>, std::less<>> streams_;
};

}  // namespace vgen
