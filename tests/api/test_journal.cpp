// Journal: rows survive reopening (a new process after a crash), unfinished ones are listed in
// submission order or marked interrupted, finished ones keep their result, ids are counted.
#include "api/journal.hpp"
#include "runtime/errors.hpp"
#include "tests/support/job_store_contract.hpp"
#include "tests/support/python_reference.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <sqlite3.h>

#include <fstream>

namespace fs = std::filesystem;
using namespace vgen;

TEST_CASE("the journal keeps submitted and finished jobs across reopening") {
  const auto dir = test::temp_dir("vgen-journal-");
  const auto file = dir / "j.db";
  {
    Journal j(file);
    j.record_submitted("job-1", "k1", {{"prompt", "a"}});
    j.record_submitted("job-2", "k2", {{"prompt", "b"}, {"steps", 3}});
    j.record_submitted("job-10", "k3", {{"prompt", "c"}});
    j.record_submitted("other", "k4", {{"prompt", "d"}});
    JournalRecord done;
    done.id = "job-1";
    done.status = "done";
    done.output = "/out/a.mp4";
    done.output_bytes = 1234;
    done.content_type = "video/mp4";
    done.retries = 2;
    done.cache_hit = true;
    j.record_finished(done);
    j.record_submitted("refused", "k5", {{"prompt", "e"}});
    j.forget("refused");
  }  // closed without a clean shutdown of anything else: reopen like a restarted process
  Journal j(file);
  const auto one = j.find("job-1");
  REQUIRE(one);
  CHECK(one->status == "done");
  CHECK(one->output == "/out/a.mp4");
  CHECK(one->output_bytes == 1234);
  CHECK(one->retries == 2);
  CHECK(one->cache_hit);
  CHECK(one->finished_unix > 1'700'000'000);
  CHECK(j.find("job-2")->finished_unix == 0);
  CHECK(one->spec.at("prompt").as_string() == "a");
  const auto open = j.unfinished();
  REQUIRE(open.size() == 3);
  CHECK(open[0].id == "job-2");
  CHECK(open[0].spec.at("steps").as_int64() == 3);
  CHECK(open[1].id == "job-10");
  CHECK(open[2].id == "other");
  CHECK_FALSE(j.find("refused"));
  CHECK(j.max_job_number("job-") == 10);
  j.mark_unfinished_interrupted();
  CHECK(j.unfinished().empty());
  CHECK(j.find("job-2")->status == "interrupted");
  fs::remove_all(dir);
}

TEST_CASE("an unusable journal file is named") {
  try {
    Journal j("/nonexistent-dir/x/j.db");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("/nonexistent-dir/x/j.db") != std::string::npos);
  }
}

TEST_CASE("the SQLite journal keeps the job store contract across reopening") {
  const auto dir = test::temp_dir("vgen-journal-");
  std::unique_ptr<Journal> j;
  test::check_job_store_contract([&](bool reopen) -> JobStore& {
    if (reopen || !j) {
      j.reset();  // closed as a killed process leaves it, then opened again
      j = std::make_unique<Journal>(dir / "j.db");
    }
    return *j;
  });
  register_builtin_job_stores();
  auto again = job_stores().get("sqlite")(dir / "j.db");
  CHECK(again->location() == (dir / "j.db").string());
  CHECK(again->find("c"));
  j.reset();
  again.reset();
  fs::remove_all(dir);
}

TEST_CASE("the SQLite journal lists its jobs newest first, by status, in pages") {
  const auto dir = test::temp_dir("vgen-journal-list-");
  {
    Journal j(dir / "j.db");
    test::check_job_store_list_contract(j);
  }
  fs::remove_all(dir);
}

TEST_CASE("a journal from before the attempts column gains it and keeps its rows") {
  const auto dir = test::temp_dir("vgen-journal-old-");
  const auto file = dir / "old.db";
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
    const char* sql =
        "CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, key TEXT, "
        "spec TEXT, status TEXT NOT NULL, output TEXT DEFAULT '', output_bytes INTEGER DEFAULT 0, content_type TEXT DEFAULT '', "
        "error_kind TEXT DEFAULT '', error TEXT DEFAULT '', seconds REAL DEFAULT 0, retries INTEGER DEFAULT 0, "
        "cache_hit INTEGER DEFAULT 0, submitted_at TEXT DEFAULT CURRENT_TIMESTAMP, finished_at TEXT);"
        "INSERT INTO jobs (id, key, spec, status) VALUES ('job-1', 'k', '{\"prompt\":\"a\"}', 'queued');";
    REQUIRE(sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  Journal j(file);
  const auto r = j.find("job-1");
  REQUIRE(r);
  CHECK(r->attempts == 0);
  CHECK(j.claim("job-1") == 1);
  CHECK(j.unfinished().size() == 1);
  fs::remove_all(dir);
}

TEST_CASE("a garbage, truncated or directory journal is refused as invalid_argument, not a crash") {
  const auto dir = test::temp_dir("vgen-journal-bad-");
  std::ofstream(dir / "garbage.db") << std::string(5000, 'x');
  fs::create_directories(dir / "adir.db");
  for (const auto& f : {dir / "garbage.db", dir / "adir.db"}) {
    try {
      Journal j(f);
      FAIL("no error for " << f);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find(f.string()) != std::string::npos);
    }
  }
  fs::remove_all(dir);
}
