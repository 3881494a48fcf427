#include "apps/vgen/progress.hpp"

#include <cstdio>
#include <iostream>
#include <unistd.h>

namespace vgen::cli {

namespace {

std::string bar(int step, int total, int width = 24) {
  const int filled = total > 0 ? step * width / total : 0;
  return "[" + std::string(filled, '#') + std::string(width - filled, '-') + "]";
}

}  // namespace

Progress::Progress(std::size_t total_jobs) : tty_(isatty(2) != 0), total_(total_jobs) {}

void Progress::set_total(std::size_t total_jobs) {
  std::lock_guard lock(mutex_);
  total_ = total_jobs;
}

std::string Progress::count() const {
  return "[" + std::to_string(ended_) + (total_ ? "/" + std::to_string(total_) : "") + " jobs] ";
}

void Progress::draw(const std::string& text) {
  std::cerr << "\r\033[2K" << text << std::flush;
  drawn_ = true;
}

void Progress::on_event(const std::string& label, const JobEvent& e) {
  std::lock_guard lock(mutex_);
  const std::string overall = total_ != 1 ? count() : "";
  if (tty_) {
    if (is_terminal(e.state)) return;  // on_job_end / the caller reports it
    std::string line = overall + label + " " + std::string(e.status());
    if (e.total > 0) line += " " + bar(e.step, e.total) + " " + std::to_string(e.step) + "/" + std::to_string(e.total);
    draw(line);
  } else if (e.total == 0 && !is_terminal(e.state)) {  // stage changes only, no per-step lines
    std::cerr << overall << label << " " << e.status() << "\n";
  } else if (total_ == 1 && e.total > 0 && e.step == e.total) {
    std::cerr << label << " " << e.status() << " " << e.step << "/" << e.total << "\n";
  }
}

void Progress::on_job_end(const std::string& label, const std::string& status, double seconds) {
  std::lock_guard lock(mutex_);
  ++ended_;
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f s", seconds);
  const std::string line = count() + label + " " + status +
                           (status == "done" ? std::string(" ") + secs : "");
  if (tty_) {
    std::cerr << "\r\033[2K" << line << "\n";
    drawn_ = false;
  } else {
    std::cerr << line << "\n";
  }
}

void Progress::finish() {
  std::lock_guard lock(mutex_);
  if (tty_ && drawn_) std::cerr << "\n";
  drawn_ = false;
}

}  // namespace vgen::cli
