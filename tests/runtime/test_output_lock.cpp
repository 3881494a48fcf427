// OutputLock: one owner per directory, refused with the owner's pid, released on destruction
// and when the owning process is killed with SIGKILL.
#include "runtime/output_lock.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace vgen;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("vgen-output-lock-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The Error a second lock on `dir` throws, if any.
std::optional<Error> refusal(const fs::path& dir) {
  try {
    auto lock = OutputLock::for_directory(dir);
    return std::nullopt;
  } catch (const Error& e) {
    return e;
  }
}

}  // namespace

TEST_CASE("a second owner of the same directory is refused until the first lets go") {
  const auto dir = fresh_dir("same-process");
  {
    auto first = OutputLock::for_directory(dir);
    CHECK(first.path() == dir / ".vgen.lock");
    CHECK(read_file(first.path()) == std::to_string(::getpid()) + "\n");
    const auto e = refusal(dir);
    REQUIRE(e);
    CHECK(e->kind() == ErrorKind::overloaded);
    const std::string what = e->what();
    CHECK(what.find("'" + dir.string() + "' is in use by another vgen process (pid " + std::to_string(::getpid()) + ")") !=
          std::string::npos);
    auto moved = std::move(first);  // ownership moves, the lock stays held
    CHECK(refusal(dir));
  }
  CHECK_FALSE(fs::exists(dir / ".vgen.lock"));  // removed as it was released
  CHECK_FALSE(refusal(dir));                     // and free to take
  CHECK_FALSE(fs::exists(dir / ".vgen.lock"));
  fs::remove_all(dir);
}

TEST_CASE("a journal kept elsewhere has its own lock file next to it") {
  const auto dir = fresh_dir("file");
  auto lock = OutputLock::for_file(dir / "jobs.db");
  CHECK(lock.path() == dir / ".jobs.db.lock");
  CHECK_THROWS_AS(OutputLock::for_file(dir / "jobs.db"), Error);
  CHECK_NOTHROW(OutputLock::for_file(dir / "other.db"));
  CHECK_NOTHROW(OutputLock::for_directory(dir));  // a different lock file
  fs::remove_all(dir);
}

TEST_CASE("a missing directory is the caller's error") {
  try {
    OutputLock::for_directory(fs::temp_directory_path() / "vgen-output-lock-no-such-dir" / "x");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("cannot create the lock file") != std::string::npos);
  }
}

TEST_CASE("the lock of a process killed with SIGKILL is released" * doctest::timeout(60)) {
  const auto dir = fresh_dir("killed");
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    try {
      auto lock = OutputLock::for_directory(dir);
      (void)!::write(ready[1], "k", 1);
      for (;;) ::pause();  // held until killed
    } catch (...) {
      ::_exit(3);
    }
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);  // the child holds the lock now
  ::close(ready[0]);
  const auto e = refusal(dir);
  REQUIRE(e);
  CHECK(std::string(e->what()).find("(pid " + std::to_string(child) + ")") != std::string::npos);
  REQUIRE(::kill(child, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(fs::exists(dir / ".vgen.lock"));  // a dead owner leaves its file behind...
  CHECK_FALSE(refusal(dir));              // ...but the kernel dropped its lock
  fs::remove_all(dir);
}

TEST_CASE("owners coming and going never overlap, removal of the file included" * doctest::timeout(120)) {
  // Two processes take and release the lock in a loop; each checks, while it holds the lock,
  // that the other does not (a marker file created exclusively while held).
  const auto dir = fresh_dir("churn");
  const auto marker = dir / "held";
  auto churn = [&] {
    for (int i = 0; i < 5000; ++i) {
      try {
        auto lock = OutputLock::for_directory(dir);
        const int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) return 1;  // the other process holds the lock as well
        ::close(fd);
        ::unlink(marker.c_str());
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::overloaded) return 2;
      }
    }
    return 0;
  };
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(churn());
  const int mine = churn();
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(mine == 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  fs::remove_all(dir);
}
