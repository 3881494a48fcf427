// The Batcher's group boundaries under the auto-tuner's batch switch (set_max_batch): waiting
// groups taken in by the group placed first, and what the emptied ones give back. The other
// cases are in test_batcher.cpp (split at its size limit); the helpers in batcher_bench.hpp.
#include "stages/exec/batcher.hpp"

#include <doctest/doctest.h>

#include "runtime/executor.hpp"
#include "tests/stages/exec/batcher_bench.hpp"

#undef CHECK  // LibTorch defines one
#define CHECK DOCTEST_CHECK

using namespace vgen;
using namespace vgen::batcher_test;
namespace asio = boost::asio;

TEST_CASE("set_max_batch (the auto-tuner's switch) reaches jobs waiting for the device at the next group boundary, never a running group" *
          doctest::timeout(120)) {
  // One device; a long wait: a group can only start by filling up or taking the device.
  Bench b(1, std::chrono::seconds(30));
  auto family = test::make_fake_family("fake-a");
  std::vector<std::shared_ptr<Job>> jobs;
  for (std::uint64_t s : {41, 42, 43, 44}) jobs.push_back(make_job(family, s));
  auto prepare = [&]() -> asio::awaitable<void> {  // first, so that no preprocess group waits on the blocked device below
    for (auto& j : jobs) co_await b.batcher->join(family, *j, BatchKind::preprocess);
  };
  b.executor.run_sync(prepare());
  // The first job's group holds the device (blocked in its first
  // call) while the three others each form a group of one (cap 1) waiting for it.
  std::promise<void> running, go;
  auto go_future = go.get_future().share();
  test::fake(*family).on_predict = [&](std::size_t call, std::size_t) {
    if (call == 1) {
      running.set_value();
      go_future.wait();
    }
  };
  auto ex = b.executor.get_executor();
  std::vector<std::future<std::exception_ptr>> done;
  done.push_back(asio::co_spawn(ex, render(*b.batcher, family, jobs[0], false), asio::use_future));
  running.get_future().wait();
  for (std::size_t i = 1; i < 4; ++i) done.push_back(asio::co_spawn(ex, render(*b.batcher, family, jobs[i], false), asio::use_future));
  // One io thread runs handlers in order: once this one ran, the three joins above have formed their groups.
  asio::co_spawn(ex, []() -> asio::awaitable<void> { co_return; }, asio::use_future).get();
  b.batcher->set_max_batch(3);
  go.set_value();
  for (auto& d : done) CHECK(d.get() == nullptr);
  CHECK(b.batcher->max_batch() == 3);
  // The running group kept its one row (nobody joined it late); the first waiting group took
  // the other two waiting jobs in when it got the device (a wrong cap would give 1+1+1 or 2+1).
  auto sizes = b.batcher->group_sizes(BatchKind::denoise);
  CHECK(sizes == std::map<std::size_t, std::uint64_t>{{1, 1}, {3, 1}});
  CHECK(test::fake(*family).max_rows_after(4) == 3);
  for (std::uint64_t s : {41, 42, 43, 44}) CHECK(at::equal(family_job(*jobs[s - 41])->state.latents, alone(s)));
}

TEST_CASE("groups emptied by the group placed first give their queued acquire back at once, not when their turn comes" *
          doctest::timeout(120)) {
  Bench b(1, std::chrono::seconds(30));  // one device, one lease
  auto family = test::make_fake_family("fake-a");
  std::vector<std::shared_ptr<Job>> jobs;
  for (std::uint64_t s : {51, 52, 53, 54}) jobs.push_back(make_job(family, s));
  auto prepare = [&]() -> asio::awaitable<void> {
    for (auto& j : jobs) co_await b.batcher->join(family, *j, BatchKind::preprocess);
  };
  b.executor.run_sync(prepare());
  // The first job's group holds the device; the three others wait in groups of one. Then the
  // batch goes to 3: the first of them, placed, takes the other two in and blocks in its call
  // of 3 rows while the test looks at the device's queue.
  std::promise<void> first_running, taken_running, go_first, go_taken;
  auto go_first_f = go_first.get_future().share();
  auto go_taken_f = go_taken.get_future().share();
  std::atomic<bool> seen_three{false};
  test::fake(*family).on_predict = [&](std::size_t call, std::size_t rows) {
    if (call == 1) {
      first_running.set_value();
      go_first_f.wait();
    }
    if (rows == 3 && !seen_three.exchange(true)) {
      taken_running.set_value();
      go_taken_f.wait();
    }
  };
  auto ex = b.executor.get_executor();
  std::vector<std::future<std::exception_ptr>> done;
  done.push_back(asio::co_spawn(ex, render(*b.batcher, family, jobs[0], false), asio::use_future));
  first_running.get_future().wait();
  for (std::size_t i = 1; i < 4; ++i) done.push_back(asio::co_spawn(ex, render(*b.batcher, family, jobs[i], false), asio::use_future));
  // One io thread runs handlers in order: after the first no-op the joins have run, after the
  // second their groups' coroutines too (each queues its acquire without suspending before it).
  for (int i = 0; i < 2; ++i) asio::co_spawn(ex, []() -> asio::awaitable<void> { co_return; }, asio::use_future).get();
  CHECK(b.pool.waiting() == 3);
  b.batcher->set_max_batch(3);
  go_first.set_value();
  taken_running.get_future().wait();
  // The two emptied groups' acquires are cancelled on their strands: wait for those handlers to run
  // (one io thread: a handler posted after them runs after them).
  asio::co_spawn(ex, []() -> asio::awaitable<void> { co_return; }, asio::use_future).get();
  CHECK(b.pool.waiting() == 0);  // before: 2 until the group of 3 ended
  go_taken.set_value();
  for (auto& d : done) CHECK(d.get() == nullptr);
  CHECK(b.batcher->group_sizes(BatchKind::denoise) == std::map<std::size_t, std::uint64_t>{{1, 1}, {3, 1}});
  for (std::uint64_t s : {51, 52, 53, 54}) CHECK(at::equal(family_job(*jobs[s - 51])->state.latents, alone(s)));
}

TEST_CASE("batching.max_decode_batch caps decode groups below max_batch; denoise groups keep max_batch" * doctest::timeout(120)) {
  // A long wait: groups start only by filling up, so their sizes are the caps.
  Bench b(4, std::chrono::seconds(30));
  b.batcher = std::make_shared<Batcher>(BatcherOptions{.batching = {.max_batch = 4, .max_decode_batch = 2, .wait = std::chrono::seconds(30)},
                                                       .executor = &b.executor, .devices = &b.pool});
  CHECK(b.batcher->cap_for(BatchKind::decode) == 2);
  CHECK(b.batcher->cap_for(BatchKind::denoise) == 4);
  auto family = test::make_fake_family("fake-a");
  std::vector<std::shared_ptr<Job>> jobs;
  for (std::uint64_t s : {61, 62, 63, 64}) jobs.push_back(make_job(family, s));
  for (auto& e : render_all(b, of(family, jobs))) CHECK(e == nullptr);
  auto decode_all = [&]() -> asio::awaitable<void> {
    std::vector<std::future<void>> done;
    for (auto& j : jobs)
      done.push_back(asio::co_spawn(b.executor.get_executor(), b.batcher->join(family, *j, BatchKind::decode), asio::use_future));
    for (auto& d : done) {
      while (d.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) co_await test::sleep_for(std::chrono::milliseconds(2));
      d.get();
    }
  };
  b.executor.run_sync(decode_all());
  CHECK(b.batcher->group_sizes(BatchKind::denoise) == std::map<std::size_t, std::uint64_t>{{4, 1}});
  CHECK(b.batcher->group_sizes(BatchKind::decode) == std::map<std::size_t, std::uint64_t>{{2, 2}});
  for (auto& j : jobs) CHECK(family_job(*j)->frames.defined());
  // The tuner's switch below the decode cap lowers both; 0 leaves decode groups at max_batch, as before.
  b.batcher->set_max_batch(1);
  CHECK(b.batcher->cap_for(BatchKind::decode) == 1);
  CHECK(b.batcher->cap_for(BatchKind::denoise) == 1);
  CHECK(Batcher(BatcherOptions{.batching = {.max_batch = 3}, .executor = &b.executor, .devices = &b.pool}).cap_for(BatchKind::decode) == 3);
}
