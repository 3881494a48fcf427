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

// JobStore::list on a fresh, empty store: newest accepted first, a status filter, pages that
// neither repeat nor skip a row, and a cursor that stays valid while rows are added.
inline void check_job_store_list_contract(JobStore& s) {
  CHECK(s.list({}).jobs.empty());
  CHECK(s.list({}).next == 0);
  for (const char* id : {"j1", "j2", "j3", "j4", "j5"}) s.record_accepted(id, "k", {{"prompt", id}});
  s.record_accepted("gone", "k", {{"prompt", "gone"}});
  s.forget("gone");
  for (const char* id : {"j2", "j4"}) {
    JobRecord r;
    r.id = id;
    r.status = "done";
    r.output = std::string("/out/") + id + ".mp4";
    s.record_finished(r);
  }
  s.claim("j5");
  const auto all = s.list({});
  REQUIRE(all.jobs.size() == 5);
  CHECK(all.jobs[0].id == "j5");
  CHECK(all.jobs[0].status == "running");
  CHECK(all.jobs[4].id == "j1");
  CHECK(all.jobs[1].spec.at("prompt").as_string() == "j4");
  CHECK(all.next == 0);

  auto first = s.list({.status = "", .limit = 2});
  REQUIRE(first.jobs.size() == 2);
  CHECK(first.jobs[0].id == "j5");
  CHECK(first.jobs[1].id == "j4");
  REQUIRE(first.next != 0);
  s.record_accepted("j6", "k", {{"prompt", "j6"}});  // a newer row does not shift later pages
  const auto second = s.list({.status = "", .limit = 2, .before = first.next});
  REQUIRE(second.jobs.size() == 2);
  CHECK(second.jobs[0].id == "j3");
  CHECK(second.jobs[1].id == "j2");
  REQUIRE(second.next != 0);
  const auto third = s.list({.status = "", .limit = 2, .before = second.next});
  REQUIRE(third.jobs.size() == 1);
  CHECK(third.jobs[0].id == "j1");
  CHECK(third.next == 0);

  const auto done = s.list({.status = "done", .limit = 1});
  REQUIRE(done.jobs.size() == 1);
  CHECK(done.jobs[0].id == "j4");
  CHECK(done.jobs[0].output == "/out/j4.mp4");
  const auto done2 = s.list({.status = "done", .limit = 1, .before = done.next});
  REQUIRE(done2.jobs.size() == 1);
  CHECK(done2.jobs[0].id == "j2");
  CHECK(done2.next == 0);
  CHECK(s.list({.status = "failed"}).jobs.empty());
  const auto queued = s.list({.status = "queued"});
  REQUIRE(queued.jobs.size() == 3);
  CHECK(queued.jobs[0].id == "j6");
  CHECK(s.list({.status = "", .limit = 0}).jobs.size() == 1);  // 0 is read as 1
}

}  // namespace vgen::test
