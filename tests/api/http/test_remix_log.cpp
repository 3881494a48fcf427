// The remix log: one appended line a remix (never a rewrite of the others), a torn last line
// skipped, dead entries (deleted or expired videos) compacted away on opening and when they
// outnumber the live ones.
#include "api/http/remix_log.hpp"

#include "runtime/errors.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>

using namespace vgen;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return std::move(out).str();
}

void write(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary) << text;
}

ino_t inode(const fs::path& file) {
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  return st.st_ino;
}

}  // namespace

TEST_CASE("add appends one line to the same file; a new log reads them back") {
  test::TempDir dir;
  const auto file = dir / ".vgen-videos-remixed";
  {
    RemixLog log(file, nullptr);
    CHECK(log.source_of("r1").empty());
    log.add("r1", "s1");
    const auto first = inode(file);
    log.add("r2", "s1");
    log.add("r0", "r1");
    // Appended in order, not rewritten sorted, and in the same inode (no atomic replace).
    CHECK(read(file) == "r1 s1\nr2 s1\nr0 r1\n");
    CHECK(inode(file) == first);
    CHECK(log.file_lines() == 3);
    CHECK(log.source_of("r0") == "r1");
  }
  RemixLog again(file, [](const std::string&) { return true; });
  CHECK(again.source_of("r1") == "s1");
  CHECK(again.source_of("r2") == "s1");
  CHECK(again.source_of("r0") == "r1");
  CHECK(again.source_of("s1").empty());
  CHECK(again.file_lines() == 3);
  CHECK(read(file) == "r1 s1\nr2 s1\nr0 r1\n");  // nothing dead: not rewritten
}

TEST_CASE("a torn last line is skipped, and removed before the next append") {
  test::TempDir dir;
  const auto file = dir / ".vgen-videos-remixed";
  write(file, "r1 s1\nr2 s");  // a crash in the middle of r2's append
  RemixLog log(file, nullptr);
  CHECK(log.source_of("r1") == "s1");
  CHECK(log.source_of("r2").empty());
  CHECK(read(file) == "r1 s1\n");
  log.add("r3", "s3");
  CHECK(read(file) == "r1 s1\nr3 s3\n");  // r3 does not join the torn line
  RemixLog again(file, nullptr);
  CHECK(again.source_of("r3") == "s3");
  CHECK(again.source_of("r2").empty());
}

TEST_CASE("entries of deleted or expired videos are dropped when the log is opened") {
  test::TempDir dir;
  const auto file = dir / ".vgen-videos-remixed";
  write(file, "r1 s1\ngone s1\nr3 s3\nnot-a-pair\n");
  std::set<std::string> asked;
  RemixLog log(file, [&](const std::string& id) {
    asked.insert(id);
    return id != "gone";
  });
  CHECK(asked == std::set<std::string>{"r1", "gone", "r3"});
  CHECK(log.source_of("gone").empty());
  CHECK(log.source_of("r3") == "s3");
  CHECK(read(file) == "r1 s1\nr3 s3\n");
  CHECK(log.file_lines() == 2);
}

TEST_CASE("forget compacts once dead lines outnumber live ones, not before") {
  test::TempDir dir;
  const auto file = dir / ".vgen-videos-remixed";
  RemixLog log(file, nullptr);
  for (const char* id : {"a", "b", "c", "d"}) log.add(id, "s");
  log.forget("a");
  log.forget("b");  // 2 dead, 2 live: the file keeps every line
  CHECK(log.file_lines() == 4);
  CHECK(read(file) == "a s\nb s\nc s\nd s\n");
  CHECK(log.source_of("a").empty());
  log.forget("nobody");  // not a remix: nothing changes
  CHECK(log.file_lines() == 4);
  log.forget("c");  // 3 dead, 1 live: rewritten with the live one
  CHECK(log.file_lines() == 1);
  CHECK(read(file) == "d s\n");
  log.add("e", "d");
  CHECK(read(file) == "d s\ne d\n");
  RemixLog again(file, nullptr);
  CHECK(again.source_of("e") == "d");
  CHECK(again.source_of("c").empty());
}

TEST_CASE("a log that cannot be written throws, naming the file") {
  test::TempDir dir;
  write(dir / "file", "x");
  RemixLog log(dir / "file" / ".vgen-videos-remixed", nullptr);  // its folder is a file
  CHECK_THROWS_WITH_AS(log.add("r1", "s1"), doctest::Contains(".vgen-videos-remixed"), Error);
  CHECK(log.source_of("r1") == "s1");  // known until the process ends, as the header says
}
