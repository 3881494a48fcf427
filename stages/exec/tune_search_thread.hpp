// TuneSearchThread: steps an AutoTuner's search (stages/exec/auto_tune.hpp) between jobs on a
// thread of its own ("vgen-tune"), so that jobs never wait for the tuner beyond one measurement.
#pragma once

#include "stages/exec/auto_tune.hpp"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

namespace vgen {

// Steps a search on its own thread ("vgen-tune") whenever the device is free, so that jobs never
// wait for the tuner: after each poke() (e.g. a job ended) and `idle_grace` of quiet, it asks
// `hold_device` for the device (a guard that keeps new work off it until released, or null when
// work is running or waiting) and measures one setting while holding it; it goes on while the
// device stays free. Work that arrives meanwhile waits at most for that one measurement, and
// no measurement is started whose estimated cost (TuneSearch::next) passes `max_step`: one of
// unknown cost waits until a sample gives an estimate (e.g. a running job's), one estimated
// above it is skipped (TuneSearch::skip). When
// the search is over it calls on_done (on this thread) with the finished choice (cached).
// Ownership: owns the search and the thread. Thread-safety: poke() from any thread. The
// destructor stops it: no new measurement starts; one under way is waited for. An error from
// the search (not out of memory) ends it: on_error gets it, nothing is switched.
class TuneSearchThread {
 public:
  struct Hooks {
    std::function<std::shared_ptr<void>()> hold_device;  // null: busy, try again at the next poke
    std::function<void(const TuneChoice&)> on_done;
    std::function<void(std::exception_ptr)> on_error;
    std::chrono::duration<double> idle_grace{1.0};
    std::chrono::duration<double> max_step{std::numeric_limits<double>::infinity()};
  };
  TuneSearchThread(std::unique_ptr<TuneSearch> search, Hooks hooks);
  ~TuneSearchThread();
  TuneSearchThread(const TuneSearchThread&) = delete;
  TuneSearchThread& operator=(const TuneSearchThread&) = delete;

  void poke();
  bool finished() const;  // the search ended (done, failed or stopped)
  TuneChoice current() const;  // the search's best so far
  TuneSearch& search() noexcept { return *search_; }  // e.g. to observe() running jobs (thread-safe)

 private:
  void run();
  std::unique_ptr<TuneSearch> search_;
  Hooks hooks_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool poked_ = true, stop_ = false, finished_ = false;
  std::thread thread_;
};

}  // namespace vgen
