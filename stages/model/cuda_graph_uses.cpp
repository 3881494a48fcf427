#include "stages/model/cuda_graph_uses.hpp"

#include <spdlog/spdlog.h>

#include <map>
#include <mutex>
#include <tuple>

namespace vgen {

namespace {

using Key = std::tuple<std::string, std::string, std::string>;  // package, component, device

struct Record {
  std::mutex mutex;
  std::map<Key, CudaGraphUse> uses;
};

Record& record() {
  static Record r;
  return r;
}

// The site's entry; the caller holds the mutex.
CudaGraphUse& use_of(Record& r, const CudaGraphSite& site) {
  auto [it, first] = r.uses.try_emplace(Key{site.package.string(), site.component, site.device});
  if (first) {
    it->second.package = site.package;
    it->second.component = site.component;
    it->second.device = site.device;
  }
  return it->second;
}

}  // namespace

void record_cuda_graph_capture(const CudaGraphSite& site, std::string_view method, std::string_view shapes, double ms) {
  auto& r = record();
  {
    std::lock_guard lock(r.mutex);
    ++use_of(r, site).captures;
  }
  spdlog::info("cuda graphs: captured {} {} on {} at {} in {:.1f} ms", site.file.filename().string(), method, site.device,
               shapes, ms);
}

void record_cuda_graph_failure(const CudaGraphSite& site, std::string_view method, std::string_view shapes,
                               std::string_view why) {
  auto& r = record();
  {
    std::lock_guard lock(r.mutex);
    ++use_of(r, site).failures;
  }
  spdlog::warn("cuda graphs: {} {} on {} at {} cannot be captured, runs without a graph: {}", site.file.string(), method,
               site.device, shapes, why);
}

void record_cuda_graph_replay(const CudaGraphSite& site) {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  ++use_of(r, site).replays;
}

std::vector<CudaGraphUse> cuda_graph_uses() {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  std::vector<CudaGraphUse> out;
  for (const auto& [_, u] : r.uses) out.push_back(u);
  return out;
}

void clear_cuda_graph_uses() {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  r.uses.clear();
}

}  // namespace vgen
