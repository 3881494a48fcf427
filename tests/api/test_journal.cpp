// Journal: rows survive reopening (a new process after a crash), unfinished ones are listed in
// submission order or marked interrupted, finished ones keep their result, ids are counted.
#include "api/journal.hpp"
#include "runtime/errors.hpp"
#include "tests/support/python_reference.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

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
