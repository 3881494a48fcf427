// Tracer: a timeline of what the runtime did, written as Chrome / Perfetto trace JSON
// ("Trace Event Format": {"traceEvents": [...]}; open it at ui.perfetto.dev or chrome://tracing).
//
// Tracks. Every span is on a named track; a track is a (process, thread) pair of the format,
// named by metadata events. The runtime uses three processes:
//   "stages"  one track per pipeline stage worker ("<stage> worker 2"): a span per job stage;
//   "devices" one track per compute thread of a device lease ("cpu:0 thread 1", "cuda:0 thread 0"): a span per
//             model call (each with its batch size), as the stages record them;
//   "jobs"    one track per job: its queue waits and its stages, retries as instant events.
// `thread_track(prefix)` names the calling thread's track "<prefix> thread <n>", n counted per
// prefix in order of first use, so a span on a worker pool lands on that thread's own track.
//
// Recording is off until begin() and costs one relaxed atomic load per hook while off.
// Captures nest: begin() returns the capture's start; end(start) returns the events that
// ended at or after it (the trace JSON) and, when the last capture ends, drops the buffer.
// `vgen --trace FILE` is one capture from the Runtime's start to its shutdown; the service's
// GET /v1/trace?seconds=N is one capture of N seconds. The buffer is bounded (max_events);
// events past it are counted in the trace's "droppedEvents" instead of kept.
//
// Thread-safety: every member may be called from any thread (one mutex, held only to append or
// copy). Nothing blocks beyond that mutex; nothing here is cancellable or needs to be.
// Ownership: the Tracer owns its events; TraceSpan holds a pointer to a Tracer that must
// outlive it (null: the span does nothing).
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace vgen {

class Tracer {
 public:
  using clock = std::chrono::steady_clock;

  explicit Tracer(std::size_t max_events = 2'000'000);

  bool enabled() const noexcept { return captures_.load(std::memory_order_relaxed) > 0; }

  // A complete span [start, end) on `track` of process `process` ("stages", "devices", "jobs").
  void span(std::string_view process, std::string_view track, std::string_view name, clock::time_point start,
            clock::time_point end, boost::json::object args = {});
  // A point event (a retry, an out-of-memory move).
  void instant(std::string_view process, std::string_view track, std::string_view name, clock::time_point at,
               boost::json::object args = {});
  // The calling thread's track under `prefix` ("<prefix> thread <n>").
  std::string thread_track(std::string_view prefix);

  clock::time_point begin();
  boost::json::value end(clock::time_point start);
  // end(start), written atomically to `file` (runtime/atomic_file: its Error when it cannot be).
  void end_to_file(clock::time_point start, const std::filesystem::path& file);

 private:
  struct Event {
    char phase;  // 'X' complete, 'i' instant
    std::uint32_t pid, tid;
    std::string name;
    clock::time_point start, end;
    boost::json::object args;
  };
  std::pair<std::uint32_t, std::uint32_t> ids_for(std::string_view process, std::string_view track);  // mutex held
  void add(Event e);
  double micros(clock::time_point t) const;

  const std::size_t max_events_;
  const clock::time_point origin_ = clock::now();
  std::atomic<int> captures_{0};
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::uint64_t dropped_ = 0;
  std::map<std::string, std::uint32_t, std::less<>> processes_;
  std::map<std::pair<std::uint32_t, std::string>, std::uint32_t, std::less<>> tracks_;
  std::map<std::pair<std::string, std::thread::id>, std::string, std::less<>> thread_tracks_;
  std::map<std::string, std::uint32_t, std::less<>> thread_counts_;
};

// A span from construction to destruction on the calling thread's track under `prefix`
// (process "devices"); args may be added while it runs. Does nothing when the tracer is null
// or not recording at construction.
class TraceSpan {
 public:
  TraceSpan(Tracer* tracer, std::string_view prefix, std::string_view name, boost::json::object args = {});
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Tracer* tracer_ = nullptr;
  std::string track_, name_;
  Tracer::clock::time_point start_;
  boost::json::object args_;
};

// Checks that `trace` has the shape Perfetto's JSON importer reads: an object with a
// "traceEvents" array whose events carry name, ph, pid, tid, and ts (and dur >= 0 for "X"),
// with every (pid, tid) used named by a thread_name metadata event. Returns the problems found
// (empty: valid).
std::vector<std::string> check_trace_json(const boost::json::value& trace);

}  // namespace vgen
