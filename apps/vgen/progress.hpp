// Progress on stderr: on a terminal one line redrawn in place with a bar; otherwise plain
// lines, one per stage change or finished job (so logs stay readable). Thread-safe: events
// arrive on Runtime threads.
#pragma once

#include "runtime/job.hpp"

#include <mutex>
#include <string>

namespace vgen::cli {

class Progress {
 public:
  // total_jobs 0: not known yet (a batch still reading its input); see set_total.
  explicit Progress(std::size_t total_jobs = 1);
  void set_total(std::size_t total_jobs);
  bool tty() const noexcept { return tty_; }
  // A job's event; `label` names the job in the line.
  void on_event(const std::string& label, const JobEvent& e);
  // A job ended (batch): advances the overall count and prints its line.
  void on_job_end(const std::string& label, const std::string& status, double seconds);
  void finish();  // ends the redrawn line

 private:
  void draw(const std::string& text);
  std::string count() const;  // "[3/40 jobs] ", or "[3 jobs] " while the total is unknown
  std::mutex mutex_;
  const bool tty_;
  std::size_t total_, ended_ = 0;
  bool drawn_ = false;
};

}  // namespace vgen::cli
