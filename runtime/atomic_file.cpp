#include "runtime/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <utility>

namespace vgen {

namespace fs = std::filesystem;

ErrorKind io_error_kind(int errno_value) noexcept {
  switch (errno_value) {
    case ENOSPC:
    case EDQUOT:
    case EIO:
    case EAGAIN:
    case EINTR:
    case EBUSY:
    case ENFILE:
    case EMFILE:
    case ENOMEM:
    case ETIMEDOUT:
    case ESTALE:
      return ErrorKind::transient;
    default:
      return ErrorKind::internal;
  }
}

namespace {

constexpr std::string_view tmp_tag = ".tmp-";
constexpr std::string_view old_tag = ".old-";

[[noreturn]] void fail(int err, const std::string& what) {
  throw Error(io_error_kind(err), what + ": " + std::generic_category().message(err));
}

[[noreturn]] void fail(const std::error_code& ec, const std::string& what) {
  // std::filesystem reports errno values in the system (or generic) category.
  const bool is_errno = ec.category() == std::system_category() || ec.category() == std::generic_category();
  throw Error(is_errno ? io_error_kind(ec.value()) : ErrorKind::internal, what + ": " + ec.message());
}

fs::path folder_of(const fs::path& target) {
  return target.parent_path().empty() ? fs::path(".") : target.parent_path();
}

// "<folder>/.<name><tag><pid>-<12 hex digits>".
fs::path sibling_path(const fs::path& target, std::string_view tag) {
  thread_local std::mt19937_64 random{std::random_device{}()};
  char suffix[40];
  std::snprintf(suffix, sizeof suffix, "%ld-%012llx", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(random() & 0xffffffffffffULL));
  return folder_of(target) / ("." + target.filename().string() + std::string(tag) + suffix);
}

bool all_of(std::string_view s, bool (*pred)(char)) {
  return !s.empty() && std::all_of(s.begin(), s.end(), pred);
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }

// The part after the tag: "<pid>-<hex>" now, or bare hex/decimal digits from older versions.
// Returns whether it is one, and the writer's pid when the name records it.
bool parse_suffix(std::string_view suffix, std::optional<long>& pid) {
  pid.reset();
  const auto dash = suffix.find('-');
  if (dash == std::string_view::npos) return all_of(suffix, is_hex);
  const auto digits = suffix.substr(0, dash);
  long value = 0;
  if (!all_of(digits, is_digit) || !all_of(suffix.substr(dash + 1), is_hex) ||
      std::from_chars(digits.data(), digits.data() + digits.size(), value).ec != std::errc{})
    return false;
  pid = value;
  return true;
}

// Splits ".<name><tag><suffix>" at the last tag; nullopt if `filename` is not such a name.
struct TemporaryName {
  std::string_view target;  // <name>
  std::optional<long> pid;
};
std::optional<TemporaryName> parse_temporary(std::string_view filename) {
  if (filename.size() < 2 || filename.front() != '.') return std::nullopt;
  for (std::string_view tag : {tmp_tag, old_tag}) {
    const auto at = filename.rfind(tag);
    if (at == std::string_view::npos || at < 2) continue;
    TemporaryName name{filename.substr(1, at - 1), std::nullopt};
    if (parse_suffix(filename.substr(at + tag.size()), name.pid)) return name;
  }
  return std::nullopt;
}

bool writer_alive(long pid) {
  if (pid <= 0) return false;
  if (pid == static_cast<long>(::getpid())) return true;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;  // EPERM: alive, not ours
}

void close_checked(int fd, const std::string& what) {
  // close() can report a deferred write error (NFS); EINTR still closes the descriptor on Linux.
  if (::close(fd) != 0 && errno != EINTR) fail(errno, what);
}

void fsync_one(const fs::path& path, bool directory, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) fail(errno, what);
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail(err, what);
  }
  close_checked(fd, what);
}

// fsyncs a file, or every file and directory of a tree (the directories hold the names).
void sync_tree(const fs::path& path, const std::string& what) {
  std::error_code ec;
  const auto status = fs::symlink_status(path, ec);
  if (ec) fail(ec, what);
  if (!fs::is_directory(status)) {
    if (fs::is_regular_file(status)) fsync_one(path, false, what);
    return;
  }
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const auto type = it->symlink_status(ec).type();
    if (ec) break;
    if (type == fs::file_type::regular || type == fs::file_type::directory)
      fsync_one(it->path(), type == fs::file_type::directory, what);
  }
  if (ec) fail(ec, what);
  fsync_one(path, true, what);
}

// Owns a temporary until commit(); removes it (a file or a whole tree) otherwise.
class Temporary {
 public:
  explicit Temporary(const fs::path& target) : target_(target), path_(sibling_path(target, tmp_tag)) {}
  Temporary(const Temporary&) = delete;
  Temporary& operator=(const Temporary&) = delete;
  ~Temporary() {
    if (path_.empty()) return;
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

  // Syncs the temporary (unless the writer did), renames it over the target and syncs the
  // folder. A writer that closed its files before this reopens them: fsync then reports the
  // writeback errors still pending, not one that already happened (Linux's errseq), which is
  // why write_bytes syncs on its own descriptor.
  void commit(bool synced = false) {
    if (!synced) sync_tree(path_, "writing " + target_.string());
    std::error_code ec;
    fs::rename(path_, target_, ec);
    std::error_code probe;
    if (ec && fs::is_directory(path_, probe) && fs::is_directory(target_, probe)) replace_directory(ec);
    if (ec) fail(ec, "moving the new output onto " + target_.string());
    path_.clear();
    fsync_one(folder_of(target_), true, "syncing the folder of " + target_.string());
  }

 private:
  // rename(2) does not replace a non-empty directory: move the old one aside first.
  void replace_directory(std::error_code& ec) {
    const fs::path old = sibling_path(target_, old_tag);
    fs::rename(target_, old, ec);
    if (ec) return;
    fs::rename(path_, target_, ec);
    std::error_code ignored;
    if (!ec) {
      fs::remove_all(old, ignored);
      return;
    }
    std::error_code put_back;
    fs::rename(old, target_, put_back);  // the previous output returns...
    // ...unless a concurrent writer published the target meanwhile: then it is superseded.
    if (put_back && fs::exists(fs::symlink_status(target_, ignored))) fs::remove_all(old, ignored);
  }

  fs::path target_;
  fs::path path_;
};

void check_target(const fs::path& target) {
  if (target.filename().empty() || target.filename() == "." || target.filename() == "..")
    throw Error(ErrorKind::invalid_argument, "output path names no file: '" + target.string() + "'");
}

void write_bytes(const fs::path& target, const char* data, std::size_t size) {
  check_target(target);
  Temporary tmp(target);
  const std::string what = "writing " + target.string();
  const int fd = ::open(tmp.path().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail(errno, what);
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      fail(err, what);
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail(err, what);
  }
  close_checked(fd, what);
  tmp.commit(true);
}

std::size_t sweep(const fs::path& dir, std::optional<std::string_view> target_name) {
  std::size_t removed = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string filename = it->path().filename().string();
    const auto name = parse_temporary(filename);
    if (!name || (target_name && name->target != *target_name)) continue;
    if (name->pid && writer_alive(*name->pid)) continue;
    std::error_code remove_ec;
    if (fs::remove_all(it->path(), remove_ec) > 0 && !remove_ec) ++removed;
  }
  return removed;
}

}  // namespace

void write_file_atomically(const fs::path& target, std::string_view bytes) {
  write_bytes(target, bytes.data(), bytes.size());
}

void write_file_atomically(const fs::path& target, std::span<const std::uint8_t> bytes) {
  write_bytes(target, reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void write_atomically(const fs::path& target, const AtomicWriter& write) {
  check_target(target);
  Temporary tmp(target);
  write(tmp.path());
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(tmp.path(), ec)))
    throw Error(ErrorKind::internal, "writing " + target.string() + ": the writer created nothing");
  tmp.commit();
}

void copy_atomically(const fs::path& from, const fs::path& to) {
  check_target(to);
  std::error_code ec;
  if (fs::equivalent(from, to, ec)) return;  // an error here (to missing) means: not the same
  const bool directory = fs::is_directory(from, ec);
  if (ec) fail(ec, "copying " + from.string() + " to " + to.string());
  write_atomically(to, [&](const fs::path& tmp) {
    std::error_code copy_ec;
    if (directory) fs::copy(from, tmp, fs::copy_options::recursive, copy_ec);
    else fs::copy_file(from, tmp, copy_ec);
    if (copy_ec) fail(copy_ec, "copying " + from.string() + " to " + to.string());
  });
}

std::size_t sweep_temporaries(const fs::path& dir) { return sweep(dir, std::nullopt); }

std::size_t sweep_temporaries_of(const fs::path& target) {
  const std::string name = target.filename().string();
  return name.empty() ? 0 : sweep(folder_of(target), std::string_view(name));
}

bool is_temporary_name(std::string_view filename) noexcept { return parse_temporary(filename).has_value(); }

void append_line_durably(const fs::path& file, std::string_view line) {
  const auto fail = [&file](const char* step, int err) {
    throw_error(io_error_kind(err), "append to " + file.string() + ": " + step + ": " + std::strerror(err));
  };
  std::error_code ec;
  const bool created = !fs::exists(file, ec);
  const int fd = ::open(file.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);  // read: the last byte
  if (fd < 0) fail("open", errno);
  struct stat before {};
  const bool sized = ::fstat(fd, &before) == 0;
  // A crash can leave a torn last line: start a fresh one, or this line would join it and be
  // lost to a reader that skips malformed lines.
  std::string whole;
  if (sized && before.st_size > 0) {
    char last = '\n';
    if (::pread(fd, &last, 1, before.st_size - 1) == 1 && last != '\n') {
      whole = "\n";
      whole += line;
      line = whole;
    }
  }
  std::size_t done = 0;
  while (done < line.size()) {  // O_APPEND: each write lands at the end, a short one continues it
    const auto n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      if (sized && done > 0) (void)::ftruncate(fd, before.st_size);  // no torn line for the next append to join
      ::close(fd);
      fail("write", err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("fsync", err);
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

}  // namespace vgen
