// Memory of queued jobs: a vgen::Runtime on a model package with a first queue of capacity
// >= N, N distinct jobs submitted without waiting (try_submit), their handles kept (as a
// service would), RSS sampled, then shutdown() cancels them all.
//
//   bench_memory --model PKG --out DIR --queued N [--steps S]
//
// A warm-up job runs first (module loading, first allocations), then the baseline is read.
// Reads VmRSS and VmHWM (peak RSS) from /proc/self/status: at baseline, right after the N
// submissions, and after shutdown. One JSON object on stdout (kB).
#include "api/engine.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace json = boost::json;
using clock_type = std::chrono::steady_clock;

namespace {

long status_kb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  return -1;
}

json::object sample() { return {{"rss_kb", status_kb("VmRSS")}, {"hwm_kb", status_kb("VmHWM")}}; }

}  // namespace

int main(int argc, char** argv) {
  vgen::RuntimeConfig c;
  c.retry_attempts = 1;
  std::size_t queued = 100;
  int steps = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") c.model = v;
    else if (k == "--out") c.output_dir = v;
    else if (k == "--queued") queued = std::stoul(v);
    else if (k == "--steps") steps = std::stoi(v);
    else {
      std::cerr << "bench_memory: unknown flag " << k << "\n";
      return 2;
    }
  }
  c.stages["preprocess"].queue = std::max<std::size_t>(queued + 16, 64);
  json::object out{{"queued", queued}, {"first_queue_capacity", c.stages["preprocess"].queue}};
  vgen::read_environment(c);  // OMP_NUM_THREADS, VGEN_FAULTS: as the vgen app reads them
  vgen::Runtime rt(c);
  auto spec = [steps](std::size_t i) {
    return json::object{{"prompt", "a red circle moving left on a black background, clip " + std::to_string(i)},
                        {"name", "mem-" + std::to_string(i)}, {"seed", i}, {"steps", steps},
                        {"width", 32}, {"height", 32}, {"frames", 5}};
  };
  auto warm = spec(1u << 30);
  warm["steps"] = 2;
  rt.submit(warm).wait();
  out["baseline"] = sample();

  std::vector<vgen::JobHandle> handles;
  handles.reserve(queued);
  const auto t0 = clock_type::now();
  for (std::size_t i = 0; i < queued; ++i) handles.push_back(rt.try_submit(spec(i)));
  out["submit_seconds"] = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  out["queued_sample"] = sample();
  const auto st = rt.stats();
  out["stats"] = {{"submitted", st.submitted}, {"queued", st.queued}, {"in_flight", st.in_flight}};
  rt.shutdown();
  out["after_shutdown"] = sample();
  std::size_t cancelled = 0;
  for (auto& h : handles) cancelled += h.result().state == vgen::JobState::cancelled;
  out["cancelled"] = cancelled;
  std::cout << json::serialize(out) << std::endl;
  return 0;
}
