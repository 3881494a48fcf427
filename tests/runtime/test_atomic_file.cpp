// Atomic output: complete targets or none, no temporaries left behind on success or failure,
// transient errors for a full disk (a tiny tmpfs, when the test may mount one), and a sweep
// that removes only what dead writers left.
#include "runtime/atomic_file.hpp"

#include "tests/support/temp_dir.hpp"

#include "tests/support/tmpfs.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using vgen::Error;
using vgen::ErrorKind;

using vgen::test::TempDir;
using vgen::test::listing;

namespace {



std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void touch(const fs::path& file, const std::string& text = "x") { std::ofstream(file, std::ios::binary) << text; }

struct Failure {
  ErrorKind kind = ErrorKind::internal;
  std::string message;
  bool thrown = false;
};
template <class F>
Failure failure_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.kind(), e.what(), true};
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A pid that has just exited (a reaped child): no process runs under it now.
long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return static_cast<long>(child);
}

}  // namespace

TEST_CASE("errno values a retry may fix are transient, the rest internal") {
  for (int e : {ENOSPC, EDQUOT, EIO, EAGAIN, EMFILE}) CHECK(vgen::io_error_kind(e) == ErrorKind::transient);
  for (int e : {ENOTDIR, EACCES, ENAMETOOLONG, EISDIR, ENOTEMPTY, ENOENT, EROFS})
    CHECK(vgen::io_error_kind(e) == ErrorKind::internal);
}

TEST_CASE("write_file_atomically writes and replaces a file, leaving nothing else") {
  TempDir dir;
  vgen::write_file_atomically(dir / "a.json", std::string_view("first"));
  CHECK(read(dir / "a.json") == "first");
  const std::vector<std::uint8_t> bytes{'s', 'e', 'c', 0, 'd'};
  vgen::write_file_atomically(dir / "a.json", bytes);
  CHECK(read(dir / "a.json") == std::string("sec\0d", 5));
  vgen::write_file_atomically(dir / "empty", std::string_view());
  CHECK(fs::file_size(dir / "empty") == 0);
  CHECK(listing(dir.path()) == std::vector<std::string>{"a.json", "empty"});
  const auto nameless = failure_of([&] { vgen::write_file_atomically(dir.path() / "", std::string_view("x")); });
  CHECK(nameless.kind == ErrorKind::invalid_argument);
}

TEST_CASE("append_line_durably appends to the same file, creating it, and names it when it cannot") {
  TempDir dir;
  vgen::append_line_durably(dir / "log", "a 1\n");
  struct stat first {}, second {};
  REQUIRE(::stat((dir / "log").c_str(), &first) == 0);
  vgen::append_line_durably(dir / "log", "b 2\n");
  REQUIRE(::stat((dir / "log").c_str(), &second) == 0);
  CHECK(read(dir / "log") == "a 1\nb 2\n");
  CHECK(first.st_ino == second.st_ino);  // appended in place, not replaced by a rewrite
  CHECK(listing(dir.path()) == std::vector<std::string>{"log"});  // no temporary beside it
  touch(dir / "torn", "a 1\nb");  // a crash tore the last line
  vgen::append_line_durably(dir / "torn", "c 3\n");
  CHECK(read(dir / "torn") == "a 1\nb\nc 3\n");  // the new line stands on its own
  touch(dir / "file");
  const auto f = failure_of([&] { vgen::append_line_durably(dir / "file" / "log", "x\n"); });
  CHECK(f.thrown);
  CHECK(contains(f.message, (dir / "file" / "log").string()));
  CHECK(f.kind == ErrorKind::internal);  // ENOTDIR: no retry fixes it
}

TEST_CASE("the writer gets a recognisable temporary in the target's folder") {
  TempDir dir;
  fs::path seen;
  vgen::write_atomically(dir / "clip.mp4", [&](const fs::path& tmp) {
    seen = tmp;
    CHECK_FALSE(fs::exists(tmp));
    touch(tmp, "video");
  });
  CHECK(seen.parent_path() == dir.path());
  const std::string name = seen.filename().string();
  CHECK(name.starts_with(".clip.mp4.tmp-" + std::to_string(::getpid()) + "-"));
  CHECK(vgen::is_temporary_name(name));
  CHECK_FALSE(vgen::is_temporary_name("clip.mp4"));
  CHECK_FALSE(vgen::is_temporary_name(".config"));
  CHECK_FALSE(vgen::is_temporary_name("a.tmp-1-abc"));  // not hidden
  CHECK_FALSE(vgen::is_temporary_name(".a.tmp-notes"));
  CHECK(read(dir / "clip.mp4") == "video");
  CHECK(listing(dir.path()) == std::vector<std::string>{"clip.mp4"});
}

TEST_CASE("a directory replaces a directory whole") {
  TempDir dir;
  auto frames = [](int n) {
    return [n](const fs::path& tmp) {
      fs::create_directory(tmp);
      fs::create_directory(tmp / "sub");
      for (int i = 0; i < n; ++i) touch(tmp / ("frame_" + std::to_string(i) + ".png"), std::to_string(i));
    };
  };
  vgen::write_atomically(dir / "frames", frames(5));
  CHECK(listing(dir / "frames").size() == 6);
  vgen::write_atomically(dir / "frames", frames(2));
  CHECK(listing(dir / "frames") == std::vector<std::string>{"frame_0.png", "frame_1.png", "sub"});
  CHECK(listing(dir.path()) == std::vector<std::string>{"frames"});  // no .old- or .tmp- left
}

TEST_CASE("a failing writer leaves no temporary and the target as it was") {
  TempDir dir;
  touch(dir / "out", "old");
  CHECK_THROWS_AS(vgen::write_atomically(dir / "out", [](const fs::path& tmp) {
                    touch(tmp, "half");
                    throw std::runtime_error("encoder failed");
                  }),
                  std::runtime_error);  // passed on unchanged
  CHECK_THROWS_AS(vgen::write_atomically(dir / "out", [](const fs::path& tmp) {
                    fs::create_directories(tmp / "a" / "b");
                    touch(tmp / "a" / "b" / "f");
                    throw Error(ErrorKind::transient, "disk hiccup");
                  }),
                  Error);
  const auto nothing = failure_of([&] { vgen::write_atomically(dir / "out", [](const fs::path&) {}); });
  CHECK(nothing.thrown);
  CHECK(contains(nothing.message, "created nothing"));
  CHECK(read(dir / "out") == "old");
  CHECK(listing(dir.path()) == std::vector<std::string>{"out"});
}

TEST_CASE("impossible targets are internal errors naming the path, and leave nothing") {
  TempDir dir;
  touch(dir / "file", "f");
  // The parent is a file.
  const auto under_file = failure_of([&] { vgen::write_file_atomically(dir / "file" / "x.json", std::string_view("x")); });
  CHECK(under_file.thrown);
  CHECK(under_file.kind == ErrorKind::internal);
  CHECK(contains(under_file.message, (dir / "file" / "x.json").string()));
  CHECK(contains(under_file.message, "Not a directory"));
  // A file cannot replace a non-empty directory; a directory cannot replace a file.
  fs::create_directory(dir / "taken");
  touch(dir / "taken" / "keep");
  const auto onto_dir = failure_of([&] { vgen::write_file_atomically(dir / "taken", std::string_view("x")); });
  CHECK(onto_dir.kind == ErrorKind::internal);
  CHECK(contains(onto_dir.message, (dir / "taken").string()));
  const auto onto_file = failure_of([&] { vgen::write_atomically(dir / "file", [](const fs::path& t) { fs::create_directory(t); }); });
  CHECK(onto_file.kind == ErrorKind::internal);
  CHECK(listing(dir.path()) == std::vector<std::string>{"file", "taken"});
  CHECK(listing(dir / "taken") == std::vector<std::string>{"keep"});
  CHECK(read(dir / "file") == "f");
}

TEST_CASE("copy_atomically copies files and directories, and onto itself does nothing") {
  TempDir dir;
  touch(dir / "a.gif", "gif");
  fs::create_directories(dir / "frames" / "sub");
  touch(dir / "frames" / "f0.png", "0");
  touch(dir / "frames" / "sub" / "f1.png", "1");
  fs::create_directory(dir / "out");
  vgen::copy_atomically(dir / "a.gif", dir / "out" / "b.gif");
  vgen::copy_atomically(dir / "frames", dir / "out" / "frames");
  CHECK(read(dir / "out" / "b.gif") == "gif");
  CHECK(read(dir / "out" / "frames" / "sub" / "f1.png") == "1");
  touch(dir / "a.gif", "new");
  vgen::copy_atomically(dir / "a.gif", dir / "out" / "b.gif");  // replaces
  CHECK(read(dir / "out" / "b.gif") == "new");
  vgen::copy_atomically(dir / "a.gif", dir / "a.gif");
  CHECK(read(dir / "a.gif") == "new");
  const auto missing = failure_of([&] { vgen::copy_atomically(dir / "missing", dir / "out" / "m"); });
  CHECK(missing.thrown);
  CHECK(contains(missing.message, "missing"));
  CHECK(listing(dir / "out") == std::vector<std::string>{"b.gif", "frames"});
  CHECK(listing(dir.path()) == std::vector<std::string>{"a.gif", "frames", "out"});
}

TEST_CASE("sweep_temporaries removes what dead writers left, nothing else") {
  TempDir dir;
  const std::string dead = std::to_string(dead_pid());
  const std::string self = std::to_string(::getpid());
  touch(dir / "clip.mp4");
  touch(dir / (".clip.mp4.tmp-" + dead + "-0123456789ab"));     // crashed writer
  fs::create_directory(dir / (".frames.tmp-" + dead + "-00000000000f"));
  touch(dir / (".frames.tmp-" + dead + "-00000000000f") / "frame_0.png");
  fs::create_directory(dir / (".frames.old-" + dead + "-0000000000aa"));
  touch(dir / ".clip.mp4.tmp-3735928559");                    // an older vgen's name, no pid
  touch(dir / (".clip.mp4.tmp-" + self + "-0123456789ab"));   // a write in progress here
  touch(dir / ".config");
  touch(dir / "notes.tmp-1-ab");
  touch(dir / (".other.gif.tmp-" + dead + "-0000000000cc"));

  CHECK(vgen::sweep_temporaries_of(dir / "clip.mp4") == 2);  // only clip.mp4's dead ones
  CHECK(fs::exists(dir / (".other.gif.tmp-" + dead + "-0000000000cc")));
  CHECK(vgen::sweep_temporaries(dir.path()) == 3);
  CHECK(listing(dir.path()) == std::vector<std::string>{".clip.mp4.tmp-" + self + "-0123456789ab", ".config",
                                                        "clip.mp4", "notes.tmp-1-ab"});
  CHECK(vgen::sweep_temporaries(dir / "missing") == 0);
}

TEST_CASE("concurrent writers of one target: readers see a whole version, never a part"
          * doctest::timeout(120)) {
  TempDir dir;
  const fs::path target = dir / "summary.json";
  vgen::write_file_atomically(target, std::string(4096, 'i'));
  for (int writers : {2, 4}) {
    CAPTURE(writers);
    std::atomic<bool> torn{false};
    std::atomic<int> finished{0};
    std::thread reader([&] {
      while (finished.load() < writers) {
        const std::string text = read(target);
        if (text.size() != 4096 || std::count(text.begin(), text.end(), text[0]) != 4096) torn = true;
      }
    });
    std::vector<std::thread> threads;
    for (int w = 0; w < writers; ++w)
      threads.emplace_back([&, w] {
        for (int i = 0; i < 20; ++i) vgen::write_file_atomically(target, std::string(4096, static_cast<char>('a' + w)));
        ++finished;
      });
    for (auto& t : threads) t.join();
    reader.join();
    CHECK_FALSE(torn.load());
    CHECK(listing(dir.path()) == std::vector<std::string>{"summary.json"});
  }
}

TEST_CASE("racing directory replacements leave one whole version and no litter"
          * doctest::timeout(120)) {
  TempDir dir;
  const fs::path target = dir / "frames";
  for (int writers : {2, 4}) {
    CAPTURE(writers);
    std::vector<std::thread> threads;
    for (int w = 0; w < writers; ++w)
      threads.emplace_back([&, w] {
        for (int i = 0; i < 10; ++i) {
          try {
            vgen::write_atomically(target, [&](const fs::path& tmp) {
              fs::create_directory(tmp);
              for (int f = 0; f < 3; ++f) touch(tmp / ("frame_" + std::to_string(f)), std::to_string(w));
            });
          } catch (const Error&) {
            // A writer that lost a race may fail; the check below is what matters.
          }
        }
      });
    for (auto& t : threads) t.join();
    const auto files = listing(target);
    REQUIRE(files.size() == 3);
    const std::string winner = read(target / files[0]);
    for (const auto& f : files) CHECK(read(target / f) == winner);
    CHECK(listing(dir.path()) == std::vector<std::string>{"frames"});
  }
}

TEST_CASE("a full disk is a transient error that leaves no partial file and no temporary") {
  vgen::test::TinyTmpfs disk(64 * 1024);
  if (!disk.mounted()) {
    MESSAGE("skipped: cannot mount a tmpfs here (" << disk.reason() << "); run as root to test ENOSPC");
    return;
  }
  const fs::path target = disk.path() / "clip.bin";
  vgen::write_file_atomically(target, std::string(1000, 'o'));  // an old version to keep

  const auto write = failure_of([&] { vgen::write_file_atomically(target, std::string(256 * 1024, 'n')); });
  CHECK(write.kind == ErrorKind::transient);
  CHECK(contains(write.message, target.string()));
  CHECK(contains(write.message, "No space left on device"));
  CHECK(read(target) == std::string(1000, 'o'));
  CHECK(listing(disk.path()) == std::vector<std::string>{"clip.bin"});

  TempDir outside;
  touch(outside / "big", std::string(256 * 1024, 'b'));
  fs::create_directory(outside / "frames");
  for (int i = 0; i < 8; ++i) touch(outside / "frames" / std::to_string(i), std::string(16 * 1024, 'f'));
  for (const auto& from : {outside / "big", outside / "frames"}) {
    CAPTURE(from);
    const auto copy = failure_of([&] { vgen::copy_atomically(from, disk.path() / "copy"); });
    CHECK(copy.kind == ErrorKind::transient);
    CHECK(contains(copy.message, "copy"));
  }
  CHECK(listing(disk.path()) == std::vector<std::string>{"clip.bin"});
  // Everything the failures wrote was given back: a write that fits still succeeds.
  vgen::write_file_atomically(target, std::string(48 * 1024, 'z'));
  CHECK(fs::file_size(target) == 48 * 1024);
  CHECK(listing(disk.path()) == std::vector<std::string>{"clip.bin"});
}
