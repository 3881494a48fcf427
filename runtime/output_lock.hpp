// One owner per output directory (and per journal): an exclusive flock(2) on a small lock
// file, held for the lifetime of the OutputLock, so that a second `vgen batch` or `vgen serve`
// on the same directory is refused at start instead of running the same jobs twice.
//
//   OutputLock lock = OutputLock::for_directory(config.output_dir);  // <dir>/.vgen.lock
//
// The lock file holds the owner's pid (for the refusal message only; the lock is the flock).
// The kernel releases the lock when the last descriptor of the open file goes away: on
// destruction, on exit, and after kill -9 as well, so a crash never leaves a stale lock (the
// file stays then, unlocked, and the next owner takes it). A clean release removes the file
// while still holding it; an acquirer checks that the file it locked is still the one the path
// names (else it retries), so the removal cannot let two owners in. The descriptor is
// close-on-exec. Locks are per open file: a second OutputLock on the same file conflicts even
// within one process.
//
// Errors: Error(overloaded) when another process (or OutputLock) holds the lock: the directory
// is busy, not wrong, and the same command succeeds once the owner has ended (so it is not
// invalid_argument: exit 1, HTTP 429). Error(invalid_argument) when the lock file cannot be
// created (missing or read-only directory: the caller's path is wrong).
// Thread-safety: a const OutputLock may be shared; construction never blocks (LOCK_NB).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace vgen {

class OutputLock {
 public:
  static constexpr std::string_view file_name = ".vgen.lock";

  // Locks <dir>/.vgen.lock; `dir` must exist.
  static OutputLock for_directory(const std::filesystem::path& dir);
  // Locks <file's directory>/.<file name>.lock (e.g. a journal kept outside the output dir).
  static OutputLock for_file(const std::filesystem::path& file);

  OutputLock(OutputLock&& other) noexcept;
  OutputLock& operator=(OutputLock&& other) noexcept;
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  ~OutputLock();

  const std::filesystem::path& path() const noexcept { return path_; }  // the lock file

 private:
  OutputLock(std::filesystem::path lock_file, const std::string& what);
  void release() noexcept;
  int fd_ = -1;
  std::filesystem::path path_;
};

}  // namespace vgen
