// Test support: what every JobStore (runtime/job_store.hpp) must do, checked on a fresh,
// empty store. `reopen` makes the store again over the same place (a restarted process);
// for the in-memory store it returns the same object.
#pragma once

#include "runtime/job_store.hpp"

#include <doctest/doctest.h>

#include <functional>

namespace vgen::test {

inline void check_job_store_contract(const std::function<JobStore&(bool reopen)>& store) {
  {
    auto& s = store(false);
    s.record_accepted("a", "k1", {{"prompt", "a"}});
    s.record_accepted("b", "k2", {{"prompt", "b"}, {"steps", 3}});
    s.record_accepted("c", "k1", {{"prompt", "a"}});
    s.record_accepted("refused", "k9", {{"prompt", "x"}});
    s.forget("refused");
    CHECK(s.claim("a") == 1);
    CHECK(s.claim("a") == 2);  // a second attempt (a restart after a crash)
    s.record_accepted("g", "kg", {{"prompt", "g"}});
    CHECK(s.claim("g") == 1);
    s.unclaim("g");  // a graceful stop ended that attempt: no crash to count
    CHECK(s.find("g")->status == "queued");
    CHECK(s.find("g")->attempts == 0);
    s.record_progress("a", 3, 10, "/ckpt/a.ckpt");
    CHECK(s.find("a")->step == 3);
    CHECK(s.find("a")->total == 10);
    CHECK(s.find("a")->checkpoint == "/ckpt/a.ckpt");
    // Every ErrorKind round-trips, so that a job found after a restart tells why it ended.
    for (auto k : {ErrorKind::invalid_argument, ErrorKind::not_found, ErrorKind::already_exists, ErrorKind::overloaded,
                   ErrorKind::cancelled, ErrorKind::deadline_exceeded, ErrorKind::transient, ErrorKind::out_of_memory,
                   ErrorKind::internal}) {
      const std::string id = "e-" + std::string(to_string(k));
      s.record_accepted(id, "ke", {{"prompt", "e"}});
      JobRecord r;
      r.id = id;
      r.status = k == ErrorKind::cancelled ? "cancelled" : "failed";
      r.error_kind = std::string(to_string(k));
      r.error = "why";
      s.record_finished(r);
    }
    JobRecord done;
    done.id = "c";
    done.status = "done";
    done.output = "/out/c.mp4";
    done.output_bytes = 99;
    done.content_type = "video/mp4";
    done.retries = 1;
    s.record_progress("c", 2, 4, "/ckpt/c.ckpt");
    s.record_finished(done);
  }
  auto& s = store(true);
  const auto a = s.find("a");
  REQUIRE(a);
  CHECK(a->status == "running");
  CHECK(a->attempts == 2);
  CHECK(a->step == 3);
  CHECK(a->total == 10);
  CHECK(a->checkpoint == "/ckpt/a.ckpt");  // kept while the job is unfinished
  CHECK(a->key == "k1");
  CHECK(a->spec.at("prompt").as_string() == "a");
  CHECK_FALSE(s.find("refused"));
  for (auto k : {ErrorKind::invalid_argument, ErrorKind::not_found, ErrorKind::already_exists, ErrorKind::overloaded,
                 ErrorKind::cancelled, ErrorKind::deadline_exceeded, ErrorKind::transient, ErrorKind::out_of_memory,
                 ErrorKind::internal}) {
    const auto r = s.find("e-" + std::string(to_string(k)));
    REQUIRE(r);
    CHECK(error_kind_of(*r) == k);
    CHECK(r->finished_unix > 1'700'000'000);
  }
  const auto c = s.find_done("k1");
  REQUIRE(c);
  CHECK(c->checkpoint.empty());  // an ended job keeps no checkpoint reference
  REQUIRE(c);
  CHECK(c->id == "c");
  CHECK(c->output == "/out/c.mp4");
  CHECK(c->output_bytes == 99);
  CHECK(c->key == "k1");  // kept from acceptance
  CHECK_FALSE(s.find_done("k2"));  // not finished
  const auto by_output = s.find_output("/out/c.mp4");
  REQUIRE(by_output);
  CHECK(by_output->id == "c");
  CHECK_FALSE(s.find_output("/out/none.mp4"));
  const auto open = s.unfinished();  // queued or running, in acceptance order
  REQUIRE(open.size() == 3);
  CHECK(open[0].id == "a");
  CHECK(open[1].id == "b");
  CHECK(open[2].id == "g");
  CHECK(open[1].spec.at("steps").as_int64() == 3);
  s.mark_unfinished_interrupted();
  CHECK(s.unfinished().empty());
  CHECK(s.find("b")->status == "interrupted");
  CHECK(s.find("a")->status == "interrupted");
}

}  // namespace vgen::test
