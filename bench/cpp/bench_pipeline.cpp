// Runtime overhead: a Pipeline of fixed-cost stub stages on the real runtime core.
//
//   bench_pipeline [--jobs N] [--stages K] [--workers S] [--queue Q] [--threads W]
//                  [--io-threads T] [--cost-us C] [--latency-jobs M] [--inline 1] [--spin-us U]
//
// K stages, each with S stage workers and an input queue of capacity Q; every stage awaits
// one task of C microseconds of busy CPU on one shared WorkerPool of W threads (the
// "device" pool), exactly what a real stage does with `co_await pool.run(fn)`.
// Throughput: N jobs submitted with backpressure (submit awaits room), then drain; jobs/s is
// N / (first submit .. drain complete). Latency: M jobs one at a time on an idle pipeline,
// submit -> finished event; per hop = (latency - K*C) / K. One JSON object on stdout.
// --inline 1 runs the stub compute on the io thread instead of the pool (not what a real
// stage may do): the difference to the default isolates the cost of the worker-pool hop.
// bench/python/asyncio_pipeline.py is the same pipeline in Python asyncio.
#include "runtime/executor.hpp"
#include "runtime/pipeline.hpp"

#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace json = boost::json;
using namespace vgen;
using clock_type = std::chrono::steady_clock;

namespace {

struct Args {
  std::size_t jobs = 20000, stages = 4, workers = 2, queue = 16, threads = 2, io_threads = 1;
  double cost_us = 1.0;
  std::size_t latency_jobs = 2000;
  bool inline_compute = false;
  double spin_us = 50;  // idle polling of io and pool threads before they block
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (k == "--jobs") a.jobs = std::size_t(v);
    else if (k == "--stages") a.stages = std::size_t(v);
    else if (k == "--workers") a.workers = std::size_t(v);
    else if (k == "--queue") a.queue = std::size_t(v);
    else if (k == "--threads") a.threads = std::size_t(v);
    else if (k == "--io-threads") a.io_threads = std::size_t(v);
    else if (k == "--cost-us") a.cost_us = v;
    else if (k == "--latency-jobs") a.latency_jobs = std::size_t(v);
    else if (k == "--inline") a.inline_compute = v != 0;
    else if (k == "--spin-us") a.spin_us = v;
    else {
      std::cerr << "bench_pipeline: unknown flag " << k << "\n";
      std::exit(2);
    }
  }
  return a;
}

// Busy CPU for `us` microseconds (the stub stage's fixed cost).
int spin(double us) {
  const auto until = clock_type::now() + std::chrono::nanoseconds(static_cast<long>(us * 1000));
  int n = 0;
  while (clock_type::now() < until) ++n;
  return n;
}

std::vector<StageSpec> stub_stages(const Args& a, WorkerPool& pool) {
  std::vector<StageSpec> stages;
  for (std::size_t k = 0; k < a.stages; ++k) {
    StageFn fn = [&pool, cost = a.cost_us, inl = a.inline_compute](Job&) -> asio::awaitable<void> {
      auto work = [cost] { return spin(cost); };
      if (inl) work();
      else co_await pool.run(work);
    };
    stages.push_back({"stage" + std::to_string(k), a.workers, a.queue, fn});
  }
  return stages;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Built outside the coroutines: GCC 12 rejects brace-initialised JSON inside a coroutine
// ("array used as initializer").
json::value spec_for(std::size_t i) {
  json::object o;
  o["i"] = i;
  return o;
}

asio::awaitable<void> submit_all(Pipeline& p, std::size_t jobs) {
  for (std::size_t i = 0; i < jobs; ++i) co_await p.submit(spec_for(i));
  co_await p.drain();
}

asio::awaitable<void> one_at_a_time(Pipeline& p, std::size_t jobs, std::vector<double>& latency_us) {
  for (std::size_t i = 0; i < jobs; ++i) {
    const auto t0 = clock_type::now();
    auto job = co_await p.submit(spec_for(i));
    co_await job->finished_event().wait(asio::use_awaitable);
    latency_us.push_back(seconds_since(t0) * 1e6);
  }
  co_await p.drain();
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const std::chrono::microseconds spin{static_cast<long>(a.spin_us)};
  Executor ex(Executor::Options{.io_threads = a.io_threads, .spin = spin});
  WorkerPool& pool = ex.add_pool({.name = "compute", .threads = a.threads, .spin = spin});

  // Throughput.
  double throughput_s = 0;
  std::uint64_t done = 0;
  {
    Pipeline p(ex.get_executor(), stub_stages(a, pool));
    p.start();
    const auto t0 = clock_type::now();
    ex.run_sync(submit_all(p, a.jobs));
    throughput_s = seconds_since(t0);
    done = p.counts().done;
  }

  // Latency: one job at a time.
  std::vector<double> latency_us;
  {
    Pipeline p(ex.get_executor(), stub_stages(a, pool));
    p.start();
    ex.run_sync(one_at_a_time(p, a.latency_jobs, latency_us));
  }
  std::sort(latency_us.begin(), latency_us.end());
  const double median = latency_us.empty() ? 0 : latency_us[latency_us.size() / 2];
  const double p99 = latency_us.empty() ? 0 : latency_us[latency_us.size() * 99 / 100];

  json::object out{{"impl", "vgen"},
                   {"jobs", a.jobs},
                   {"done", done},
                   {"stages", a.stages},
                   {"workers", a.workers},
                   {"queue", a.queue},
                   {"threads", a.threads},
                   {"io_threads", a.io_threads},
                   {"cost_us", a.cost_us},
                   {"inline", a.inline_compute},
                   {"spin_us", a.spin_us},
                   {"seconds", throughput_s},
                   {"jobs_per_s", double(a.jobs) / throughput_s},
                   {"latency_jobs", a.latency_jobs},
                   {"latency_us_median", median},
                   {"latency_us_p99", p99},
                   {"per_hop_us", (median - double(a.stages) * a.cost_us) / double(a.stages)}};
  std::cout << json::serialize(out) << std::endl;
  return done == a.jobs ? 0 : 1;
}
