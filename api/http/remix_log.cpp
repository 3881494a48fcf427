#include "api/http/remix_log.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/errors.hpp"

#include <fstream>
#include <sstream>

namespace vgen {

namespace fs = std::filesystem;

RemixLog::RemixLog(fs::path file, const std::function<bool(const std::string& id)>& alive) : file_(std::move(file)) {
  std::ifstream in(file_, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const std::string all = std::move(text).str();
  bool stale = false;  // a dead, torn or unreadable line: rewrite without it
  std::size_t start = 0;
  while (start < all.size()) {
    const auto end = all.find('\n', start);
    ++file_lines_;
    if (end == std::string::npos) {  // torn by a crash mid-append: skipped, and compacted away
      stale = true;
      break;
    }
    std::istringstream line(all.substr(start, end - start));
    std::string id, source, extra;
    if (line >> id >> source && !(line >> extra) && (!alive || alive(id))) sources_[id] = source;
    else stale = true;
    start = end + 1;
  }
  if (stale) compact();
}

void RemixLog::compact() {
  std::string text;
  for (const auto& [id, source] : sources_) text += id + " " + source + "\n";
  write_file_atomically(file_, text);
  file_lines_ = sources_.size();
}

void RemixLog::add(const std::string& id, const std::string& source) {
  std::lock_guard lock(mutex_);
  sources_[id] = source;
  append_line_durably(file_, id + " " + source + "\n");
  ++file_lines_;
}

void RemixLog::forget(std::string_view id) {
  std::lock_guard lock(mutex_);
  const auto it = sources_.find(id);
  if (it == sources_.end()) return;
  sources_.erase(it);
  if (file_lines_ - sources_.size() > sources_.size()) compact();
}

std::string RemixLog::source_of(std::string_view id) const {
  std::lock_guard lock(mutex_);
  const auto it = sources_.find(id);
  return it == sources_.end() ? std::string() : it->second;
}

std::size_t RemixLog::file_lines() const {
  std::lock_guard lock(mutex_);
  return file_lines_;
}

}  // namespace vgen
