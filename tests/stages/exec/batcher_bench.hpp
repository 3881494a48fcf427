// Helpers shared by the Batcher's tests (test_batcher.cpp, test_batcher_groups.cpp): a device
// pool and executor around a Batcher, fake-family jobs, and runs through it.
#pragma once

#include "stages/exec/batcher.hpp"

#include <ATen/ATen.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>

#include <future>
#include <mutex>

#include "runtime/device_list.hpp"
#include "tests/support/async_test.hpp"
#include "tests/support/fake_family.hpp"

namespace vgen::batcher_test {

namespace asio = boost::asio;


struct Bench {
  Executor executor{{.io_threads = 1}};
  std::vector<DeviceSpec> specs;
  DevicePool pool;
  std::shared_ptr<Batcher> batcher;
  std::mutex capped_mutex;
  std::vector<std::pair<std::string, std::size_t>> capped;  // what on_capped was told
  Bench(std::size_t max_batch, std::chrono::milliseconds wait, const std::string& devices = "cpu", bool join_running = true)
      : specs(parse_device_list(devices)), pool(specs) {
    add_device_pools(executor, specs);
    batcher = std::make_shared<Batcher>(BatcherOptions{.batching = {.max_batch = max_batch, .wait = wait, .join_running = join_running},
                                                       .executor = &executor, .devices = &pool,
                                                       .on_capped = [this](const std::string& key, std::size_t cap) {
                                                         std::lock_guard lock(capped_mutex);
                                                         capped.emplace_back(key, cap);
                                                       }});
  }
};

inline std::shared_ptr<Job> make_job(const std::shared_ptr<Family>& family, std::uint64_t seed, int steps = 4) {
  boost::json::object spec{{"prompt", "p" + std::to_string(seed)}, {"seed", seed}, {"steps", steps}};
  auto job = std::make_shared<Job>("job-" + std::to_string(seed), spec);
  job->payload = family->create_job(family->validate(spec));
  return job;
}

// Prepare, denoise and return the final latents of each job, through the batcher.
inline asio::awaitable<std::exception_ptr> render(Batcher& b, std::shared_ptr<Family> family, std::shared_ptr<Job> job,
                                           bool prepare = true) {
  try {
    if (prepare) co_await b.join(family, *job, BatchKind::preprocess);
    co_await b.join(family, *job, BatchKind::denoise);
  } catch (...) {
    co_return std::current_exception();
  }
  co_return nullptr;
}

// The latents of `seed` denoised alone (max_batch 1).
inline at::Tensor alone(std::uint64_t seed, int steps = 4) {
  Bench b(1, std::chrono::milliseconds(0));
  auto family = test::make_fake_family("fake-a");
  auto job = make_job(family, seed, steps);
  auto run = [&]() -> asio::awaitable<void> {
    auto e = co_await render(*b.batcher, family, job);
    if (e) std::rethrow_exception(e);
  };
  b.executor.run_sync(run());
  return family_job(*job)->state.latents.clone();
}

// Runs every (family, job) through the batcher at once; returns each one's error (or null).
inline std::vector<std::exception_ptr> render_all(Bench& b, const std::vector<std::pair<std::shared_ptr<Family>, std::shared_ptr<Job>>>& jobs,
                                           bool prepare = true) {
  std::vector<std::exception_ptr> errors;
  auto run = [&]() -> asio::awaitable<void> {
    std::vector<std::future<std::exception_ptr>> done;
    for (const auto& [f, j] : jobs)
      done.push_back(asio::co_spawn(b.executor.get_executor(), render(*b.batcher, f, j, prepare), asio::use_future));
    for (auto& d : done) {
      while (d.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) co_await test::sleep_for(std::chrono::milliseconds(2));
      errors.push_back(d.get());
    }
  };
  b.executor.run_sync(run());
  return errors;
}

inline std::vector<std::pair<std::shared_ptr<Family>, std::shared_ptr<Job>>> of(const std::shared_ptr<Family>& f,
                                                                         const std::vector<std::shared_ptr<Job>>& jobs) {
  std::vector<std::pair<std::shared_ptr<Family>, std::shared_ptr<Job>>> out;
  for (const auto& j : jobs) out.emplace_back(f, j);
  return out;
}

}  // namespace vgen::batcher_test
