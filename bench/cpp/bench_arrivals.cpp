// Throughput and latency at a steady load of arrivals (issue 20), with jobs joining a running
// denoise group (batching.join_running true) and without (false: a group forms, later arrivals
// wait for the next group: the cross-job batching from before joining existed).
//
//   bench_arrivals --model PKG [--jobs N] [--steps S] [--max-batch B] [--repeats R]
//                  [--loads 0.5,0.9,step] [--out DIR]
//
// Two vgen::Runtime instances on one CPU device (the whole service minus HTTP: preprocess,
// denoise, decode, encode to DIR), warmed up, result cache off. First a calibration: 2B jobs
// submitted at once (two full groups) give the capacity C (jobs/s of the burst) and the
// group-step time (half the burst's makespan / S). Then, for each load and repeat, N jobs (same shape, different prompts
// and seeds) are submitted one every interval to each runtime in turn (on, off, on, off, ...):
// a load L in (0, 1] means one job every 1 / (L * C) s; "step" means one every group-step time
// (S / B times the capacity: an overload that the queue absorbs). Per run: jobs/s (N over the
// time from the first submission to the last completion), mean and p90 latency (submission to
// done), mean time to the first step (submission to the end of the job's first denoising
// step), and how many jobs joined a running group ("admitted" events).
// Prints one JSON line per run and a summary table of medians. Numbers are wall-clock on the
// machine that runs it; report its load with them.
#include "api/engine.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

const char* const kPrompts[] = {
    "a red circle moving left on a black background",    "a blue square moving right on a white background",
    "a green triangle moving up on a black background",  "a yellow circle moving down on a white background",
    "a white square moving left on a black background",  "a red triangle moving right on a white background",
    "a blue circle moving up on a black background",     "a green square moving down on a white background",
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Options {
  std::string model, out = "bench/out/arrivals";
  int jobs = 16, steps = 16, repeats = 2;
  std::size_t max_batch = 4;
  std::vector<std::string> loads{"0.5", "0.9", "step"};
};

struct RunStats {
  double jobs_per_s = 0, mean_latency = 0, p90_latency = 0, mean_first_step = 0;
  int joined = 0, failed = 0;
};

// One job's timeline, filled from its progress events (any thread).
struct Timeline {
  Clock::time_point submitted;
  std::atomic<bool> stepped{false};
  Clock::time_point first_step;
  std::atomic<bool> joined{false};
};

std::unique_ptr<vgen::Runtime> make_runtime(const Options& o, bool join) {
  vgen::RuntimeConfig c;
  c.model = o.model;
  c.output_dir = o.out;
  c.batching.max_batch = o.max_batch;
  c.batching.join_running = join;
  c.result_cache_entries = 0;  // every job renders
  c.retry_attempts = 1;
  c.spin_us = 0;               // a shared host: no polling
  c.warmup = true;
  vgen::read_environment(c);  // OMP_NUM_THREADS, VGEN_FAULTS: as the vgen app reads them
  return std::make_unique<vgen::Runtime>(c);
}

json::object spec_for(const Options& o, int i, const std::string& tag) {
  // step_cache 0: the same denoiser calls for every job whatever the package suggests.
  return {{"prompt", kPrompts[i % 8]}, {"seed", 1000 + i}, {"steps", o.steps}, {"step_cache", 0}, {"name", tag + "-" + std::to_string(i)}};
}

// N jobs, one every `interval` (0: all at once); waits for all.
RunStats run(vgen::Runtime& rt, const Options& o, int n, double interval, const std::string& tag) {
  std::vector<std::unique_ptr<Timeline>> tl;
  std::vector<vgen::JobHandle> handles;
  for (int i = 0; i < n; ++i) tl.push_back(std::make_unique<Timeline>());
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval * i)));
    auto* t = tl[static_cast<std::size_t>(i)].get();
    vgen::SubmitOptions so;
    so.on_progress = [t](const vgen::JobEvent& e) {
      if (e.status() != "denoise") return;
      if (vgen::scheduling_event(e) == "admitted") t->joined = true;
      if (vgen::scheduling_event(e).empty() && e.step >= 1 && !t->stepped.load()) {
        t->first_step = Clock::now();
        t->stepped = true;
      }
    };
    t->submitted = Clock::now();
    handles.push_back(rt.submit(spec_for(o, i, tag), std::move(so)));
  }
  std::vector<double> latency, first;
  Clock::time_point last_done = t0;
  RunStats s;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    const auto r = handles[i].wait();
    // The job's own end: its submission plus its recorded seconds (wait() returns in order).
    last_done = std::max(last_done, tl[i]->submitted + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(r.seconds)));
    if (r.state != vgen::JobState::done) {
      ++s.failed;
      std::fprintf(stderr, "%s: %s\n", r.id.c_str(), r.error.c_str());
      continue;
    }
    latency.push_back(r.seconds);
    if (tl[i]->stepped) first.push_back(seconds(tl[i]->first_step - tl[i]->submitted));
    s.joined += tl[i]->joined ? 1 : 0;
  }
  s.jobs_per_s = n / seconds(last_done - t0);
  std::sort(latency.begin(), latency.end());
  for (double l : latency) s.mean_latency += l / static_cast<double>(latency.size());
  s.p90_latency = latency.empty() ? 0 : latency[std::min(latency.size() - 1, static_cast<std::size_t>(0.9 * static_cast<double>(latency.size())))];
  for (double f : first) s.mean_first_step += f / static_cast<double>(first.size());
  return s;
}

double median(std::vector<double> v) {  // of an even count: the mean of the two middle values
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") o.model = v;
    else if (k == "--jobs") o.jobs = std::stoi(v);
    else if (k == "--steps") o.steps = std::stoi(v);
    else if (k == "--max-batch") o.max_batch = std::stoul(v);
    else if (k == "--repeats") o.repeats = std::stoi(v);
    else if (k == "--out") o.out = v;
    else if (k == "--loads") {
      o.loads.clear();
      std::stringstream in(v);
      for (std::string x; std::getline(in, x, ',');) o.loads.push_back(x);
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (o.model.empty() || o.jobs < 1 || o.steps < 1 || o.max_batch < 1 || o.repeats < 1) {
    std::fprintf(stderr, "usage: bench_arrivals --model PKG [--jobs N] [--steps S] [--max-batch B] [--repeats R] [--loads 0.5,0.9,step] [--out DIR]\n");
    return 2;
  }
  std::map<bool, std::unique_ptr<vgen::Runtime>> rts;
  for (bool join : {true, false}) rts[join] = make_runtime(o, join);
  // Calibration (join off, so that every group is full): a burst of 2B jobs at once runs as
  // two full groups back to back; jobs/s of the burst is the capacity, half its makespan the
  // time of one full group.
  const int b = static_cast<int>(o.max_batch);
  const auto t0 = Clock::now();
  run(*rts[false], o, 2 * b, 0.0, "calibrate");
  const double burst_s = seconds(Clock::now() - t0), capacity = 2 * b / burst_s, group_step_s = burst_s / 2 / o.steps;
  std::printf("{\"calibration\": {\"max_batch\": %d, \"steps\": %d, \"burst_jobs\": %d, \"burst_s\": %.3f, \"capacity_jobs_per_s\": %.3f, \"group_step_s\": %.4f}}\n",
              b, o.steps, 2 * b, burst_s, capacity, group_step_s);
  std::fflush(stdout);
  struct Row {
    std::string load;
    bool join;
    double interval;
    std::vector<RunStats> runs;
  };
  std::vector<Row> rows;
  for (const auto& load : o.loads) {
    const double interval = load == "step" ? group_step_s : 1.0 / (std::stod(load) * capacity);
    for (bool join : {true, false}) rows.push_back({load, join, interval, {}});
  }
  for (int r = 0; r < o.repeats; ++r)
    for (auto& row : rows) {
      const auto s = run(*rts[row.join], o, o.jobs, row.interval, row.join ? "on" : "off");
      row.runs.push_back(s);
      std::printf("{\"load\": \"%s\", \"join_running\": %s, \"interval_s\": %.4f, \"jobs\": %d, \"jobs_per_s\": %.4f, "
                  "\"mean_latency_s\": %.3f, \"p90_latency_s\": %.3f, \"mean_first_step_s\": %.3f, \"joined\": %d, \"failed\": %d}\n",
                  row.load.c_str(), row.join ? "true" : "false", row.interval, o.jobs, s.jobs_per_s, s.mean_latency, s.p90_latency,
                  s.mean_first_step, s.joined, s.failed);
      std::fflush(stdout);
    }
  std::printf("\n| load | interval s | join_running | jobs/s | mean latency s | p90 latency s | time to first step s | joined |\n"
              "|---|---|---|---|---|---|---|---|\n");
  for (const auto& row : rows) {
    auto med = [&](auto f) {
      std::vector<double> v;
      for (const auto& s : row.runs) v.push_back(f(s));
      return median(v);
    };
    std::printf("| %s | %.3f | %s | %.3f | %.2f | %.2f | %.2f | %.0f |\n", row.load.c_str(), row.interval, row.join ? "on" : "off",
                med([](const RunStats& s) { return s.jobs_per_s; }), med([](const RunStats& s) { return s.mean_latency; }),
                med([](const RunStats& s) { return s.p90_latency; }), med([](const RunStats& s) { return s.mean_first_step; }),
                med([](const RunStats& s) { return static_cast<double>(s.joined); }));
  }
  for (auto& [join, rt] : rts) rt->drain();
  return 0;
}
