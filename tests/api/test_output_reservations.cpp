// OutputReservations: one writer per output name, vgen's own files refused, existing outputs
// protected unless this same job wrote them; lock_output_dirs' locks.
#include "api/output_reservations.hpp"

#include "runtime/errors.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <fstream>

namespace fs = std::filesystem;
using namespace vgen;
using vgen::detail::OutputReservations;

namespace {

JobSpec named(const std::string& name) {
  JobSpec s;
  s.name = name;
  s.format = "mp4";
  return s;
}

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  FAIL("no error");
  return ErrorKind::internal;
}

const auto never_own = [](const fs::path&) { return false; };

}  // namespace

TEST_CASE("a name is written by one unfinished job at a time; vgen's own files are never outputs") {
  OutputReservations outputs("/out", "/out/jobs.db", false);
  CHECK(outputs.path_for(named(""), "id1") == fs::path("/out/id1.mp4"));
  CHECK(outputs.reserve("a", named("clip"), false, never_own) == fs::path("/out/clip.mp4"));
  CHECK(kind_of([&] { outputs.reserve("b", named("clip"), false, never_own); }) == ErrorKind::already_exists);
  outputs.release("/out/clip.mp4", "b");  // not b's: still a's
  CHECK(kind_of([&] { outputs.reserve("b", named("clip"), true, never_own); }) == ErrorKind::already_exists);
  outputs.release("/out/clip.mp4", "a");
  CHECK(outputs.reserve("b", named("clip"), false, never_own) == fs::path("/out/clip.mp4"));

  for (const std::string own : {"batch-summary.json", ".vgen.lock", "jobs.db"}) {
    JobSpec frames = named(own);
    frames.format = "png";  // a directory of frames: the name as given
    CHECK(kind_of([&] { outputs.reserve("c", frames, false, never_own); }) == ErrorKind::invalid_argument);
  }
}

TEST_CASE("an existing file is another job's output unless overwriting, resuming, or the same job") {
  const test::TempDir tmp("vgen-outputs-"), journal_tmp("vgen-outputs-journal-");
  const auto dir = tmp.path();
  std::ofstream(dir / "old.mp4") << "x";
  OutputReservations outputs(dir, {}, false);
  CHECK(kind_of([&] { outputs.reserve("a", named("old"), false, never_own); }) == ErrorKind::already_exists);
  fs::path asked;
  outputs.reserve("a", named("old"), false, [&](const fs::path& p) {
    asked = p;
    return true;
  });
  CHECK(asked == dir / "old.mp4");
  outputs.release(dir / "old.mp4", "a");
  CHECK_NOTHROW(outputs.reserve("b", named("old"), true, never_own));  // resuming: accepted under it already
  OutputReservations overwriting(dir, {}, true);
  CHECK_NOTHROW(overwriting.reserve("c", named("old"), false, never_own));

  CHECK(detail::lock_output_dirs(dir, {}).size() == 1);
  CHECK(detail::lock_output_dirs(dir, journal_tmp / "j.db").size() == 2);  // a journal kept elsewhere: its own lock
  CHECK(detail::lock_output_dirs(dir, dir / "j.db").size() == 1);
}
