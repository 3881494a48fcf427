// A tiny tmpfs for disk-full tests: mounted on a fresh temporary directory and unmounted (and
// removed) at the end. Mounting needs root (CAP_SYS_ADMIN); where it is not permitted,
// mounted() is false and reason() says why, so a test can skip with a message.
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

namespace vgen::test {

class TinyTmpfs {
 public:
  explicit TinyTmpfs(std::size_t bytes) {
    std::random_device random;
    path_ = std::filesystem::temp_directory_path() /
            ("vgen-test-tmpfs-" + std::to_string(random()) + "-" + std::to_string(random()));
    std::filesystem::create_directories(path_);
    const std::string options = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", path_.c_str(), "tmpfs", 0, options.c_str()) == 0) mounted_ = true;
    else reason_ = std::strerror(errno);
  }
  TinyTmpfs(const TinyTmpfs&) = delete;
  TinyTmpfs& operator=(const TinyTmpfs&) = delete;
  ~TinyTmpfs() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  bool mounted() const { return mounted_; }
  const std::string& reason() const { return reason_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  bool mounted_ = false;
  std::string reason_;
};

}  // namespace vgen::test
