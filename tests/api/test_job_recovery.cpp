// JobRecovery on the memory job store, with hooks standing in for the Runtime: quarantine of
// jobs that crashed the worker, the resume order (suspects first, each alone), jobs that cannot
// be resumed, a graceful stop that leaves jobs resumable, finished jobs read back.
#include "api/job_recovery.hpp"

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <map>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace json = boost::json;
using namespace vgen;
using vgen::detail::JobEntry;
using vgen::detail::JobRecovery;

namespace {

// What the Runtime would do, recorded: registrations, resubmissions (in order), ended jobs.
struct FakeRuntime {
  std::map<std::string, std::shared_ptr<JobEntry>> entries;
  std::vector<std::string> resubmitted;
  std::map<std::string, JobResult> ended;
  std::vector<std::string> dropped_checkpoints;
  bool stopping = false;

  JobRecovery::Hooks hooks() {
    JobRecovery::Hooks h;
    h.validate = [this](const json::value& v) {
      if (!v.as_object().contains("prompt")) throw_error(ErrorKind::invalid_argument, "prompt: missing");
      JobSpec s;
      s.prompt = std::string(v.at("prompt").as_string());
      return s;
    };
    h.register_resumed = [this](const std::string& id, const JobSpec& spec) {
      auto e = std::make_shared<JobEntry>();
      e->id = id;
      e->spec = spec;
      entries[id] = e;
      return e;
    };
    h.resubmit = [this](json::value, std::shared_ptr<JobEntry> e) -> asio::awaitable<void> {
      if (stopping) throw_error(ErrorKind::overloaded, "the runtime is stopping: it takes no new jobs");
      resubmitted.push_back(e->id);
      co_return;
    };
    h.end_entry = [this](const std::shared_ptr<JobEntry>& e, const JobResult& r) {
      ended[e->id] = r;
      e->promise.set_value(r);
      e->ended.set();
    };
    h.drop_checkpoint = [this](const std::string& key) { dropped_checkpoints.push_back(key); };
    h.stopping = [this] { return stopping; };
    return h;
  }
};

// An unfinished row whose compute was claimed `attempts` times by processes that died.
void accepted(JobStore& store, const std::string& id, int attempts, const char* prompt = "p") {
  json::object spec;
  if (prompt) spec["prompt"] = prompt;  // none: a spec the runtime refuses
  store.record_accepted(id, "key-" + id, spec);
  for (int i = 0; i < attempts; ++i) store.claim(id);
}

}  // namespace

TEST_CASE("jobs that crashed the worker quarantine_after times fail, the others are kept") {
  RuntimeConfig config;
  config.quarantine_after = 2;
  MetricsRegistry metrics;
  FakeRuntime rt;
  JobRecovery rec(config, metrics, rt.hooks());
  CHECK(rec.store().location() == "memory");
  accepted(rec.store(), "a", 0);
  accepted(rec.store(), "b", 1);
  accepted(rec.store(), "c", 2);
  accepted(rec.store(), "d", 3);
  const auto keep = rec.quarantine(rec.store().unfinished());
  REQUIRE(keep.size() == 2);
  CHECK(keep[0].id == "a");
  CHECK(keep[1].id == "b");
  CHECK(rec.store().find("c")->status == "failed");
  CHECK(rec.store().find("c")->error == "crashed the worker 2 times");
  CHECK(rec.store().find("d")->error_kind == "internal");
  CHECK(metrics.counter("vgen_jobs_quarantined_total", "", {}).value() == 2);

  config.quarantine_after = 0;  // off: every record is kept
  CHECK(rec.quarantine(rec.store().unfinished()).size() == 2);
}

TEST_CASE("resume: every job registered first; suspects by attempts, each alone, then the rest" * doctest::timeout(30)) {
  RuntimeConfig config;
  config.quarantine_after = 5;
  MetricsRegistry metrics;
  FakeRuntime rt;
  JobRecovery rec(config, metrics, rt.hooks());
  accepted(rec.store(), "fresh1", 0);
  accepted(rec.store(), "twice", 2);
  accepted(rec.store(), "once", 1);
  accepted(rec.store(), "fresh2", 0);
  accepted(rec.store(), "bad", 0, nullptr);

  asio::io_context io;
  rec.resume_unfinished(io.get_executor());
  CHECK(rt.entries.size() == 4);  // registered before it returned, before any resubmission
  CHECK(rt.resubmitted.empty());
  CHECK(rec.store().find("bad")->status == "failed");
  CHECK(rec.store().find("bad")->error.find("could not resume: ") == 0);

  io.poll();
  CHECK(rt.resubmitted == std::vector<std::string>{"once"});  // a suspect runs alone
  rt.entries["once"]->ended.set();
  io.poll();
  CHECK(rt.resubmitted == std::vector<std::string>{"once", "twice"});
  rt.entries["twice"]->ended.set();
  io.poll();
  CHECK(rt.resubmitted == std::vector<std::string>{"once", "twice", "fresh1", "fresh2"});  // never started: not waited for
  CHECK(rt.ended.empty());
}

TEST_CASE("a job cancelled before it resumed ends cancelled; a graceful stop leaves it resumable" * doctest::timeout(30)) {
  RuntimeConfig config;
  MetricsRegistry metrics;
  FakeRuntime rt;
  JobRecovery rec(config, metrics, rt.hooks());
  accepted(rec.store(), "x", 0);
  accepted(rec.store(), "y", 0);
  asio::io_context io;
  rec.resume_unfinished(io.get_executor());
  rt.entries["x"]->cancelled_by_request = true;  // by its client, before the coroutine reached it
  rt.stopping = true;  // y cannot be resubmitted now, but the stop came first
  io.poll();
  REQUIRE(rt.ended.count("x"));
  CHECK(rt.ended["x"].state == JobState::cancelled);
  CHECK(rec.store().find("x")->status == "cancelled");
  REQUIRE(rt.ended.count("y"));
  CHECK(rt.ended["y"].state == JobState::cancelled);
  CHECK(rec.store().find("y")->status == "queued");  // unfinished: it resumes next time
  CHECK(rt.resubmitted.empty());
}

TEST_CASE("record_finished: a stop's cancel unclaims, an end for good records it and drops the checkpoint") {
  RuntimeConfig config;
  MetricsRegistry metrics;
  FakeRuntime rt;
  JobRecovery rec(config, metrics, rt.hooks());
  accepted(rec.store(), "s", 1);
  JobEntry entry;
  entry.id = "s";
  entry.key = ContentKey{};
  JobResult r;
  r.id = "s";
  r.state = JobState::cancelled;
  rec.record_finished(entry, r, /*stopping=*/true);
  CHECK(rec.store().find("s")->status == "queued");
  CHECK(rec.store().find("s")->attempts == 0);  // the stop's attempt is no crash
  CHECK(rt.dropped_checkpoints.empty());

  entry.cancelled_by_request = true;  // the client's cancel during a stop is final
  rec.record_finished(entry, r, true);
  CHECK(rec.store().find("s")->status == "cancelled");
  CHECK(rt.dropped_checkpoints.size() == 1);
}

TEST_CASE("from_journal: finished jobs come back ended, unfinished or unknown ones do not") {
  RuntimeConfig config;
  MetricsRegistry metrics;
  FakeRuntime rt;
  JobRecovery rec(config, metrics, rt.hooks());
  accepted(rec.store(), "done", 1, "a cat");
  JobRecord d = *rec.store().find("done");
  d.status = "done";
  d.output = "/out/done.mp4";
  d.seconds = 1.5;
  rec.store().record_finished(d);
  accepted(rec.store(), "open", 0);
  accepted(rec.store(), "lost", 1);

  auto e = rec.from_journal("done");
  REQUIRE(e);
  REQUIRE(e->final_result);
  CHECK(e->final_result->state == JobState::done);
  CHECK(e->final_result->output == "/out/done.mp4");
  CHECK(e->final_result->spec.prompt == "a cat");
  CHECK(e->future.get().seconds == 1.5);
  CHECK_FALSE(rec.from_journal("open"));
  CHECK_FALSE(rec.from_journal("nobody"));

  config.resume_journal = false;  // a restart that does not resume: unfinished rows are interrupted
  rec.resume_unfinished(asio::io_context().get_executor());
  auto lost = rec.from_journal("lost");
  REQUIRE(lost);
  CHECK(lost->final_result->state == JobState::cancelled);
  CHECK(lost->final_result->error == "interrupted by a restart");
  CHECK(lost->final_result->error_kind == ErrorKind::cancelled);
  CHECK(rt.entries.empty());

  config.job_ttl = std::chrono::seconds(-1);  // older than the ttl: forgotten
  CHECK_FALSE(rec.from_journal("done"));
}
