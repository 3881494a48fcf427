#include "stages/exec/tune_search_thread.hpp"

#include <cmath>
#include <optional>

namespace vgen {

TuneSearchThread::TuneSearchThread(std::unique_ptr<TuneSearch> search, Hooks hooks)
    : search_(std::move(search)), hooks_(std::move(hooks)) {
  thread_ = std::thread([this] { run(); });
}

TuneSearchThread::~TuneSearchThread() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TuneSearchThread::poke() {
  {
    std::lock_guard lock(mutex_);
    poked_ = true;
  }
  wake_.notify_all();
}

bool TuneSearchThread::finished() const {
  std::lock_guard lock(mutex_);
  return finished_;
}

TuneChoice TuneSearchThread::current() const { return search_->current(); }

void TuneSearchThread::run() {
  try {
    while (!search_->done()) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return poked_ || stop_; });
        // Quiet for idle_grace (no poke): `vgen batch` shuts down right after its last job, and
        // must not wait for a measurement that starts in between.
        while (!stop_ && poked_) {
          poked_ = false;
          if (wake_.wait_for(lock, hooks_.idle_grace, [&] { return poked_ || stop_; }) && !stop_) continue;
        }
        if (stop_) break;
      }
      const auto next = search_->next();
      const bool capped = std::isfinite(hooks_.max_step.count());
      if (next && !std::isfinite(next->second) && capped) continue;  // its cost is unknown: wait for a sample (a job's) to tell
      if (next && next->second > hooks_.max_step.count()) {  // a job arriving now would wait too long behind it
        search_->skip();
        std::lock_guard lock(mutex_);
        poked_ = true;  // on to the next setting
        continue;
      }
      const auto held = hooks_.hold_device();
      if (!held) continue;  // work runs or waits: try again when it ends
      search_->step();
      std::lock_guard lock(mutex_);
      poked_ = true;  // the device may still be free: go on after the grace
    }
    std::unique_lock lock(mutex_);
    const bool completed = !stop_ && search_->done();
    lock.unlock();
    std::optional<TuneChoice> choice;
    if (completed) choice = search_->finish();
    lock.lock();
    finished_ = true;  // before on_done: whoever it wakes sees the thread finished
    lock.unlock();
    if (choice && hooks_.on_done) hooks_.on_done(*choice);
  } catch (...) {
    {
      std::lock_guard lock(mutex_);
      finished_ = true;
    }
    if (hooks_.on_error) hooks_.on_error(std::current_exception());
  }
}

}  // namespace vgen
