#include "runtime/output_lock.hpp"

#include "runtime/errors.hpp"

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace vgen {

namespace fs = std::filesystem;

namespace {

// The pid the current owner wrote, for the message; empty when unreadable (it may be writing).
std::string owner_pid(int fd) {
  char buf[32] = {};
  const auto n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return {};
  std::string pid(buf, static_cast<std::size_t>(n));
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.find_first_not_of("0123456789") == std::string::npos ? pid : std::string();
}

}  // namespace

OutputLock OutputLock::for_directory(const fs::path& dir) {
  return OutputLock(dir / file_name, "output directory '" + dir.string() + "'");
}

OutputLock OutputLock::for_file(const fs::path& file) {
  const auto dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  return OutputLock(dir / ("." + file.filename().string() + ".lock"), "'" + file.string() + "'");
}

OutputLock::OutputLock(fs::path lock_file, const std::string& what) : path_(std::move(lock_file)) {
  // An owner removes the file as it lets go, so the file we locked may be gone already (or
  // replaced by a newer owner's): only a lock on the file the path still names counts.
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw_error(ErrorKind::invalid_argument, "cannot create the lock file '" + path_.string() + "' for " + what + ": " +
                                                   std::strerror(errno));
    int rc;
    do rc = ::flock(fd_, LOCK_EX | LOCK_NB);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      const int err = errno;
      const auto pid = err == EWOULDBLOCK ? owner_pid(fd_) : std::string();
      ::close(fd_);
      fd_ = -1;
      if (err == EWOULDBLOCK)
        throw_error(ErrorKind::overloaded, what + " is in use by another vgen process" + (pid.empty() ? "" : " (pid " + pid + ")") +
                                               ": one batch or service at a time may own it (lock file '" + path_.string() + "')");
      throw_error(ErrorKind::internal, "cannot lock '" + path_.string() + "': " + std::strerror(err));
    }
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino)
      break;
    ::close(fd_);
    fd_ = -1;
    if (attempt == 100) throw_error(ErrorKind::internal, "cannot lock '" + path_.string() + "': it keeps being replaced");
  }
  // Ours now: record the pid for a refused second owner's message (best effort).
  const auto pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

OutputLock::OutputLock(OutputLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

OutputLock& OutputLock::operator=(OutputLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

OutputLock::~OutputLock() { release(); }

void OutputLock::release() noexcept {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still held, so that no one locks the removed file for good
  ::close(fd_);             // closing the last descriptor drops the flock
  fd_ = -1;
}

}  // namespace vgen
