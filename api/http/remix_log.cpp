#include "api/http/remix_log.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/errors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace vgen {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const fs::path& file, const char* step, int err) {
  throw_error(io_error_kind(err), std::string("remix log ") + file.string() + ": " + step + ": " + std::strerror(err));
}

// One whole line at the end of the file, durable before returning. A new file's folder entry
// is synced too, or a power cut could lose the file with its first line.
void append_line(const fs::path& file, const std::string& line) {
  std::error_code ec;
  const bool created = !fs::exists(file, ec);
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail(file, "open", errno);
  struct stat before {};
  const bool sized = ::fstat(fd, &before) == 0;
  std::size_t done = 0;
  while (done < line.size()) {  // O_APPEND: each write lands at the end, a short one continues it
    const auto n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      if (sized && done > 0) (void)::ftruncate(fd, before.st_size);  // no torn line for the next append to join
      ::close(fd);
      fail(file, "write", err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail(file, "fsync", err);
  }
  ::close(fd);
  if (created) {
    const int dir = ::open(file.parent_path().empty() ? "." : file.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);  // best effort: the line itself is already durable in the file
      ::close(dir);
    }
  }
}

}  // namespace

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
  append_line(file_, id + " " + source + "\n");
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
