// Overlap: the same N jobs through one vgen::Runtime, first one at a time (serial: each job
// alone on the machine, so its per-stage seconds are that stage's cost), then all at once
// (concurrent: stages of different jobs overlap, and denoise may batch across jobs).
//
//   bench_jobs --model PKG --out DIR [--jobs N] [--width W --height H --frames F --steps S]
//              [--guidance G] [--negative-prompt P] [--max-batch B] [--batch-wait-ms MS]
//              [--threads-per-device T] [--codec-threads C] [--spin-us US] [--mode serial|concurrent|both]
//              [--intra-op-threads N] [--jit-optimize 0|1] [--devices cpu|cpu,cpu]
//              [--warmup-jobs W]
//
// W warm-up jobs (default 1) run first, submitted together: they load the TorchScript modules
// and cache the negative prompt's embedding. With W = 2 x max_batch they form two groups, so
// every TorchScript method gets the two slow calls the profiling executor spends per method
// and process (a profiling run, then the run that optimises the graph) before timing starts.
// The two phases use different prompt texts, so the concurrent phase gets no text-cache hits
// from the serial one. The result
// cache is off. One JSON object on stdout: per job, state, seconds and stage_seconds
// (Job::record_stage_time: time from a stage's start to its end, waits inside included), and
// each phase's makespan (first submit .. last job done).
// Two LibTorch process settings that vgen itself does not expose, to measure what they would
// change: --intra-op-threads (at::set_num_threads; default: LibTorch's, one per core) and
// --jit-optimize 0 (torch::jit::setGraphExecutorOptimize(false): no profiling runs and no
// graph optimisation on the first calls of each TorchScript module).
#include "api/engine.hpp"

#include <ATen/Parallel.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace json = boost::json;
using clock_type = std::chrono::steady_clock;

namespace {

const char* const kPrompts[] = {
    "a red circle moving left on a black background", "a blue square bouncing on a white background",
    "a green triangle spinning on a blue sky",        "a yellow star falling on a green field",
    "a white cat jumping on a city street",           "a black dog floating on a sandy beach",
    "an orange ball growing in a dark room",          "a purple cube shrinking on a snowy mountain",
};

json::object spec_for(const std::string& prefix, int i, const json::object& base) {
  json::object s = base;
  s["prompt"] = prefix + kPrompts[i % 8] + (i >= 8 ? " " + std::to_string(i) : "");
  s["seed"] = i + 1;
  s["name"] = prefix.empty() ? "conc-" + std::to_string(i) : "serial-" + std::to_string(i);
  return s;
}

json::object result_json(const vgen::JobResult& r) {
  json::object stages;
  for (const auto& [k, v] : r.stage_seconds) stages[k] = v;
  return {{"id", r.id}, {"state", std::string(vgen::to_string(r.state))}, {"seconds", r.seconds},
          {"stage_seconds", stages}, {"error", r.error}};
}

// Mean jobs per batched call for each stage, from the runtime's vgen_batch_size histograms.
json::object batch_means(const std::string& metrics) {
  std::map<std::string, std::pair<double, double>> by_stage;  // stage -> (sum, count)
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const bool sum = line.rfind("vgen_batch_size_sum{", 0) == 0, count = line.rfind("vgen_batch_size_count{", 0) == 0;
    if (!sum && !count) continue;
    const auto q = line.find("stage=\""), e = line.find('"', q + 7);
    if (q == std::string::npos || e == std::string::npos) continue;
    auto& slot = by_stage[line.substr(q + 7, e - q - 7)];
    (sum ? slot.first : slot.second) = std::stod(line.substr(line.rfind(' ') + 1));
  }
  json::object out;
  for (const auto& [stage, sc] : by_stage) out[stage] = {{"calls", sc.second}, {"mean_jobs", sc.second > 0 ? sc.first / sc.second : 0.0}};
  return out;
}

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  vgen::RuntimeConfig c;
  c.retry_attempts = 1;
  c.result_cache_entries = 0;
  int jobs = 8, warmup_jobs = 1;
  std::string mode = "both";
  json::object base{{"width", 64}, {"height", 64}, {"frames", 9}, {"steps", 10}, {"guidance", 5.0}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") c.model = v;
    else if (k == "--out") c.output_dir = v;
    else if (k == "--jobs") jobs = std::stoi(v);
    else if (k == "--width") base["width"] = std::stoi(v);
    else if (k == "--height") base["height"] = std::stoi(v);
    else if (k == "--frames") base["frames"] = std::stoi(v);
    else if (k == "--steps") base["steps"] = std::stoi(v);
    else if (k == "--guidance") base["guidance"] = std::stod(v);
    else if (k == "--negative-prompt") base["negative_prompt"] = v;
    else if (k == "--max-batch") c.batching.max_batch = std::stoul(v);
    else if (k == "--batch-wait-ms") c.batching.wait = std::chrono::milliseconds(std::stoi(v));
    else if (k == "--threads-per-device") c.threads_per_device = std::stoul(v);
    else if (k == "--codec-threads") c.codec_threads = std::stoul(v);
    else if (k == "--spin-us") c.spin_us = std::stoul(v);
    else if (k == "--mode") mode = v;
    else if (k == "--warmup-jobs") warmup_jobs = std::max(1, std::stoi(v));
    else if (k == "--devices") c.devices = v;
    else if (k == "--intra-op-threads") at::set_num_threads(std::stoi(v));
    else if (k == "--jit-optimize") torch::jit::setGraphExecutorOptimize(v != "0");
    else {
      std::cerr << "bench_jobs: unknown flag " << k << "\n";
      return 2;
    }
  }
  vgen::read_environment(c);  // OMP_NUM_THREADS, VGEN_FAULTS: as the vgen app reads them
  vgen::Runtime rt(c);
  json::object out{{"jobs", jobs}, {"spec", base}, {"max_batch", c.batching.max_batch},
                   {"threads_per_device", c.threads_per_device}, {"codec_threads", c.codec_threads}, {"devices", c.devices}, {"spin_us", c.spin_us},
                   {"intra_op_threads", at::get_num_threads()},
                   {"jit_optimize", torch::jit::getGraphExecutorOptimize()}};

  const auto t_warm = clock_type::now();
  std::vector<vgen::JobHandle> warm;
  for (int i = 0; i < warmup_jobs; ++i) {
    auto spec = spec_for("warm up: ", i, base);
    spec["name"] = "warmup-" + std::to_string(i);
    warm.push_back(rt.submit(spec));
  }
  for (std::size_t i = 0; i < warm.size(); ++i) {
    auto r = warm[i].wait();
    if (i == 0) out["warmup"] = result_json(r);
  }
  out["warmup_jobs"] = warmup_jobs;
  out["warmup_seconds"] = since(t_warm);

  if (mode == "serial" || mode == "both") {
    json::array results;
    const auto t0 = clock_type::now();
    for (int i = 0; i < jobs; ++i) results.push_back(result_json(rt.submit(spec_for("a video of ", i, base)).wait()));
    out["serial"] = {{"makespan", since(t0)}, {"results", results}};
  }
  if (mode == "concurrent" || mode == "both") {
    std::vector<vgen::JobHandle> handles;
    const auto t0 = clock_type::now();
    for (int i = 0; i < jobs; ++i) handles.push_back(rt.submit(spec_for("", i, base)));
    json::array results;
    for (auto& h : handles) results.push_back(result_json(h.wait()));
    out["concurrent"] = {{"makespan", since(t0)}, {"results", results}};
  }
  out["batched_calls"] = batch_means(rt.metrics_text());  // all phases, warm-up included
  rt.drain();
  std::cout << json::serialize(out) << std::endl;
  return 0;
}
