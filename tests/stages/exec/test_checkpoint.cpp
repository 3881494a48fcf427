#include "stages/exec/checkpoint.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <boost/asio/use_future.hpp>

#include <fstream>
#include <sstream>

#include "stages/families/family.hpp"
#include "stages/schedulers/scheduler.hpp"
#include "tests/support/temp_dir.hpp"

#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

StepState sample_state() {
  at::manual_seed(9);
  StepState s;
  s.step = 3;
  s.latents = at::randn({1, 4, 2, 3, 3});
  s.scheduler.tensors = {at::Tensor(), at::randn({1, 4, 2, 3, 3}), at::randn({1, 4, 2, 3, 3}).to(at::kHalf)};
  s.scheduler.counters = {2, 1};
  return s;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream b;
  b << in.rdbuf();
  return b.str();
}

// Waits until every task posted to the one-thread pool so far has run.
void drain(WorkerPool& pool) {
  pool.run([] {}, boost::asio::use_future).get();
}

struct Rig {
  test::TempDir dir;
  WorkerPool pool{{.name = "checkpoint", .threads = 1, .spin = std::chrono::microseconds(0)}};
  MetricsRegistry metrics;
  std::vector<CheckpointWritten> written;
  std::unique_ptr<Checkpoints> checkpoints;
  explicit Rig(CheckpointOptions o) {
    o.dir = dir.path() / "ckpt";
    checkpoints = std::make_unique<Checkpoints>(o, pool, &metrics, [this](const std::vector<CheckpointWritten>& w) {
      written.insert(written.end(), w.begin(), w.end());
    });
  }
  double counter(const char* name) { return metrics.counter(name, "", {}).value(); }
};

// Runs `steps` UniPC steps of a job, calling the checkpoint hook after each, as the loop does.
void run_steps(Checkpoints& c, Job& job, FamilyJob& work, int steps, const SchedulerParams& params = {},
               const char* name = "UniPCMultistepScheduler") {
  auto s = make_scheduler(name, params);
  s->set_timesteps(steps);
  at::Tensor x = work.state.latents.clone();
  for (int i = 0; i < steps; ++i) {
    x = s->step(at::sin(x), i, x);
    work.state.step = i + 1;
    work.state.latents = x;
    work.state.scheduler = s->save_row(0);
    c.after_step({&job}, {&work}, *s);
  }
}

}  // namespace

TEST_CASE("a checkpoint round-trips exactly, and anything else is refused") {
  const auto s = sample_state();
  const auto bytes = encode_checkpoint("key-1", 10, s);
  StepState back;
  REQUIRE(decode_checkpoint(bytes, "key-1", 10, back));
  CHECK(back.step == 3);
  CHECK(back.resumed_from == 3);
  CHECK(at::equal(back.latents, s.latents));
  REQUIRE(back.scheduler.tensors.size() == 3);
  CHECK_FALSE(back.scheduler.tensors[0].defined());
  CHECK(at::equal(back.scheduler.tensors[1], s.scheduler.tensors[1]));
  CHECK((back.scheduler.tensors[2].scalar_type() == at::kHalf));
  CHECK(at::equal(back.scheduler.tensors[2], s.scheduler.tensors[2]));
  CHECK(back.scheduler.counters == s.scheduler.counters);

  StepState out;
  CHECK_FALSE(decode_checkpoint(bytes, "key-2", 10, out));  // another job's content
  CHECK_FALSE(decode_checkpoint(bytes, "key-1", 12, out));  // another step count
  CHECK_FALSE(decode_checkpoint("", "key-1", 10, out));
  CHECK_FALSE(decode_checkpoint("garbage that is not a checkpoint at all, not even close", "key-1", 10, out));
  for (std::size_t cut : {std::size_t{1}, std::size_t{33}, bytes.size() / 2, bytes.size() - 1})
    CHECK_FALSE(decode_checkpoint(std::string_view(bytes).substr(0, cut), "key-1", 10, out));
  // Any flipped byte (header, tensor data or digest) fails the digest.
  for (std::size_t at_byte = 0; at_byte < bytes.size(); at_byte += 37) {
    auto bad = bytes;
    bad[at_byte] = static_cast<char>(bad[at_byte] ^ 0x20);
    CHECK_FALSE(decode_checkpoint(bad, "key-1", 10, out));
  }
  CHECK(out.step == 0);  // untouched by every refusal
}

TEST_CASE("every K steps a checkpoint is written, never after the last step; restore puts it back") {
  Rig rig({.every_steps = 2, .every_seconds = 0, .min_steps = 4});
  Job job("job-a", boost::json::object{{"prompt", "a"}});
  FamilyJob work;
  work.spec.steps = 6;
  at::manual_seed(1);
  work.state.latents = at::randn({1, 2, 1, 4, 4});
  rig.checkpoints->begin(job, "k1", 0);
  run_steps(*rig.checkpoints, job, work, 6);
  drain(rig.pool);
  REQUIRE(rig.written.size() == 2);
  CHECK(rig.written[0].step == 2);
  CHECK(rig.written[1].step == 4);
  CHECK(rig.written[1].total == 6);
  CHECK(rig.written[1].job_id == "job-a");
  CHECK(rig.written[1].file == rig.checkpoints->file_for("k1"));
  CHECK(rig.counter("vgen_checkpoints_written_total") == 2);
  CHECK(rig.checkpoints->disk_bytes() == fs::file_size(rig.checkpoints->file_for("k1")));
  rig.checkpoints->end(job);

  // A job of the same content (after a restart) goes on from step 4 with the saved history.
  FamilyJob again;
  again.spec.steps = 6;
  again.state.latents = at::zeros({1, 2, 1, 4, 4});
  CHECK(rig.checkpoints->restore("k1", again) == 4);
  CHECK(again.state.step == 4);
  CHECK(again.state.scheduler.counters.size() == 2);
  CHECK(rig.counter("vgen_checkpoint_resumes_total") == 1);

  // The job ended for good: the file goes.
  rig.checkpoints->drop("k1");
  drain(rig.pool);
  CHECK_FALSE(fs::exists(rig.checkpoints->file_for("k1")));
  CHECK(rig.checkpoints->disk_bytes() == 0);
}

TEST_CASE("a checkpoint that does not fit its job is ignored and removed") {
  Rig rig({.every_steps = 1, .every_seconds = 0, .min_steps = 1});
  Job job("job-b", boost::json::object{{"prompt", "b"}});
  FamilyJob work;
  work.spec.steps = 4;
  work.state.latents = at::ones({1, 2, 1, 4, 4});
  rig.checkpoints->begin(job, "k2", 0);
  run_steps(*rig.checkpoints, job, work, 4);
  drain(rig.pool);
  const auto file = rig.checkpoints->file_for("k2");
  REQUIRE(fs::exists(file));
  FamilyJob other;  // another latent shape
  other.spec.steps = 4;
  other.state.latents = at::ones({1, 2, 1, 8, 8});
  CHECK(rig.checkpoints->restore("k2", other) == 0);
  CHECK(other.state.step == 0);
  CHECK_FALSE(fs::exists(file));
  CHECK(rig.counter("vgen_checkpoints_invalid_total") == 1);
  // A damaged file: the same.
  run_steps(*rig.checkpoints, job, work, 4);
  drain(rig.pool);
  auto bytes = read(file);
  bytes[bytes.size() / 2] ^= 1;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  FamilyJob same;
  same.spec.steps = 4;
  same.state.latents = at::ones({1, 2, 1, 4, 4});
  CHECK(rig.checkpoints->restore("k2", same) == 0);
  CHECK(rig.counter("vgen_checkpoints_invalid_total") == 2);
}

TEST_CASE("short jobs, stochastic schedulers and the disk budget write nothing") {
  SUBCASE("fewer steps than min_steps") {
    Rig rig({.every_steps = 1, .every_seconds = 0, .min_steps = 10});
    Job job("j", boost::json::object{{"prompt", "c"}});
    FamilyJob work;
    work.spec.steps = 5;
    work.state.latents = at::ones({1, 2, 1, 4, 4});
    rig.checkpoints->begin(job, "k3", 0);
    run_steps(*rig.checkpoints, job, work, 5);
    drain(rig.pool);
    CHECK(rig.written.empty());
  }
  SUBCASE("a scheduler that draws noise cannot resume identically") {
    Rig rig({.every_steps = 1, .every_seconds = 0, .min_steps = 1});
    Job job("j", boost::json::object{{"prompt", "c"}});
    FamilyJob work;
    work.spec.steps = 5;
    work.state.latents = at::ones({1, 2, 1, 4, 4});
    rig.checkpoints->begin(job, "k4", 0);
    run_steps(*rig.checkpoints, job, work, 5, {{"eta", 0.5}}, "DDIMScheduler");
    drain(rig.pool);
    CHECK(rig.written.empty());
  }
  SUBCASE("a step-cached job (its cache state is not in StepState)") {
    Rig rig({.every_steps = 1, .every_seconds = 0, .min_steps = 1});
    Job job("j", boost::json::object{{"prompt", "c"}});
    FamilyJob work;
    work.spec.steps = 5;
    work.spec.step_cache = 0.1;
    work.state.latents = at::ones({1, 2, 1, 4, 4});
    rig.checkpoints->begin(job, "k6", 0);
    run_steps(*rig.checkpoints, job, work, 5);
    drain(rig.pool);
    CHECK(rig.written.empty());
  }
  SUBCASE("over the budget: skipped and counted") {
    Rig rig({.every_steps = 1, .every_seconds = 0, .min_steps = 1, .max_bytes = 512});
    Job job("j", boost::json::object{{"prompt", "c"}});
    FamilyJob work;
    work.spec.steps = 5;
    work.state.latents = at::ones({1, 4, 2, 8, 8});  // 2 KiB of latents alone
    rig.checkpoints->begin(job, "k5", 0);
    run_steps(*rig.checkpoints, job, work, 5);
    drain(rig.pool);
    CHECK(rig.written.empty());
    CHECK(rig.counter("vgen_checkpoints_skipped_total") == 4);
    CHECK(rig.checkpoints->disk_bytes() == 0);
  }
}

TEST_CASE("files left by an earlier run count toward the budget; damaged temporaries are swept") {
  test::TempDir dir;
  const auto ckpt = dir.path() / "ckpt";
  fs::create_directories(ckpt);
  std::ofstream(ckpt / "abc.ckpt", std::ios::binary) << std::string(1000, 'x');
  std::ofstream(ckpt / ".abc.ckpt.tmp-999999999-000000000000", std::ios::binary) << "partial";
  WorkerPool pool{{.name = "checkpoint", .threads = 1}};
  Checkpoints c({.dir = ckpt, .every_steps = 1}, pool, nullptr);
  CHECK(c.disk_bytes() == 1000);
  CHECK_FALSE(fs::exists(ckpt / ".abc.ckpt.tmp-999999999-000000000000"));
}
