// Model load: how long vgen takes to read a package and load each of its TorchScript
// components, and the process's memory after each (bench/real_size.py runs it on the real-size
// Wan 1.3B package).
//
//   bench_load --model PKG [--device cpu]
//   bench_load --file COMPONENT.pt [--device cpu]     one TorchScript file (split or not)
//
// The package is read with load_model_package (manifest checks, sizes, sha256 of the small
// files), then every component whose format is "torchscript" is loaded with load_module, the
// function the runtime's ModuleCache calls. One JSON object on stdout:
//   {"package_seconds", "components": {name: {"bytes", "seconds", "rss_bytes", "hwm_bytes"}},
//    "total_seconds", "rss_bytes", "hwm_bytes"}
// rss/hwm are /proc/self/status VmRSS / VmHWM after that load (peak so far for hwm); cpu_seconds
// is the process's user + system time for that load (getrusage).
#include "stages/model/model_backend.hpp"
#include "stages/model/model_package.hpp"

#include <boost/json.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace json = boost::json;
using clock_type = std::chrono::steady_clock;

namespace {

std::uint64_t status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(std::strlen(key)));
  return 0;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::string model, file, device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--model") model = argv[i + 1];
    else if (k == "--file") file = argv[i + 1];
    else if (k == "--device") device = argv[i + 1];
    else {
      std::cerr << "unknown flag " << k << "\n";
      return 2;
    }
  }
  if (model.empty() == file.empty()) {
    std::cerr << "usage: bench_load --model PKG | --file COMPONENT.pt [--device cpu]\n";
    return 2;
  }
  if (!file.empty()) {
    const auto t = clock_type::now();
    const double c = cpu_seconds();
    const auto m = vgen::load_module("torchscript", file, device, c10::kFloat);
    std::cout << json::serialize(json::object{{"file", file}, {"seconds", since(t)}, {"cpu_seconds", cpu_seconds() - c},
                                              {"rss_bytes", status_kb("VmRSS:") * 1024},
                                              {"hwm_bytes", status_kb("VmHWM:") * 1024}})
              << "\n";
    return 0;
  }
  const auto t0 = clock_type::now();
  const auto package = vgen::load_model_package(model);
  json::object out{{"package_seconds", since(t0)}};
  json::object parts;
  std::vector<std::shared_ptr<const vgen::Module>> held;  // all stay loaded, as in a runtime
  for (const auto& [name, c] : package.components) {
    if (c.format != "torchscript") continue;
    const auto t = clock_type::now();
    const double cpu0 = cpu_seconds();
    held.push_back(vgen::load_module("torchscript", c.file, device, vgen::parse_dtype(c.dtype)));
    parts[name] = {{"bytes", c.bytes}, {"seconds", since(t)}, {"cpu_seconds", cpu_seconds() - cpu0}, {"rss_bytes", status_kb("VmRSS:") * 1024},
                   {"hwm_bytes", status_kb("VmHWM:") * 1024}};
  }
  out["components"] = std::move(parts);
  out["total_seconds"] = since(t0);
  out["rss_bytes"] = status_kb("VmRSS:") * 1024;
  out["hwm_bytes"] = status_kb("VmHWM:") * 1024;
  std::cout << json::serialize(out) << "\n";
  return 0;
}
