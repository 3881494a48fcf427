// Model load: how long vgen takes to read a package and load each of its TorchScript
// components, and the process's memory after each (bench/real_size.py runs it on the real-size
// Wan 1.3B package).
//
//   bench_load --model PKG [--device cpu]
//
// The package is read with load_model_package (manifest checks, sizes, sha256 of the small
// files), then every component whose format is "torchscript" is loaded with load_module, the
// function the runtime's ModuleCache calls. One JSON object on stdout:
//   {"package_seconds", "components": {name: {"bytes", "seconds", "rss_bytes", "hwm_bytes"}},
//    "total_seconds", "rss_bytes", "hwm_bytes"}
// rss/hwm are /proc/self/status VmRSS / VmHWM after that load (peak so far for hwm).
#include "stages/model_backend.hpp"
#include "stages/model_package.hpp"

#include <boost/json.hpp>

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

double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::string model, device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--model") model = argv[i + 1];
    else if (k == "--device") device = argv[i + 1];
    else {
      std::cerr << "unknown flag " << k << "\n";
      return 2;
    }
  }
  if (model.empty()) {
    std::cerr << "usage: bench_load --model PKG [--device cpu]\n";
    return 2;
  }
  const auto t0 = clock_type::now();
  const auto package = vgen::load_model_package(model);
  json::object out{{"package_seconds", since(t0)}};
  json::object parts;
  std::vector<std::shared_ptr<const vgen::Module>> held;  // all stay loaded, as in a runtime
  for (const auto& [name, c] : package.components) {
    if (c.format != "torchscript") continue;
    const auto t = clock_type::now();
    held.push_back(vgen::load_module("torchscript", c.file, device, vgen::parse_dtype(c.dtype)));
    parts[name] = {{"bytes", c.bytes}, {"seconds", since(t)}, {"rss_bytes", status_kb("VmRSS:") * 1024},
                   {"hwm_bytes", status_kb("VmHWM:") * 1024}};
  }
  out["components"] = std::move(parts);
  out["total_seconds"] = since(t0);
  out["rss_bytes"] = status_kb("VmRSS:") * 1024;
  out["hwm_bytes"] = status_kb("VmHWM:") * 1024;
  std::cout << json::serialize(out) << "\n";
  return 0;
}
