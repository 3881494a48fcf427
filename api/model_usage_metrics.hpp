// What serves each loaded model's components and how their calls ran, as /metrics series:
//   vgen_model_backend{model,component,device,backend}           1 for the backend serving it
//     (a compiled .pt2 "aoti" or "torchscript"), 0 for one that served it before;
//   vgen_attention_calls{model,component,device,method,kernel}   attention kernel calls in the
//     latest watched call of that method; 0 for a kernel a later watched call no longer ran;
//   vgen_cuda_graph_events_total{model,component,device,event}   captures, replays and failed
//     captures (model_backend.cuda_graphs), raised by what happened since the last publish.
// The records come from the process-wide logs in stages/model (component_backends,
// attention_uses, cuda_graph_uses); only entries of the given models' packages are published.
//
// Ownership: a ModelUsageMetrics holds a reference to the registry it publishes into (which
// must outlive it) and what it published last. Thread-safety: publish() may be called from
// any thread (one mutex). Nothing awaits; nothing to cancel.
#pragma once

#include "runtime/metrics.hpp"
#include "stages/model/attention_uses.hpp"
#include "stages/model/component_backends.hpp"
#include "stages/model/cuda_graph_uses.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace vgen {

// A model the Runtime serves, by name, and its package's folder (ModelPackage::dir).
struct ServedPackage {
  std::string model;
  std::filesystem::path dir;
};

// The three records at one moment.
struct ModelUsage {
  std::vector<ComponentBackend> backends;
  std::vector<AttentionUse> attention;
  std::vector<CudaGraphUse> graphs;
};

// Reads the process-wide records.
ModelUsage current_model_usage();

class ModelUsageMetrics {
 public:
  explicit ModelUsageMetrics(MetricsRegistry& metrics) : metrics_(metrics) {}
  ModelUsageMetrics(const ModelUsageMetrics&) = delete;
  ModelUsageMetrics& operator=(const ModelUsageMetrics&) = delete;

  void publish(const std::vector<ServedPackage>& models, const ModelUsage& usage);

 private:
  void publish_backends(const std::vector<ServedPackage>& models, const ModelUsage& usage);
  void publish_attention(const std::vector<ServedPackage>& models, const ModelUsage& usage);
  void publish_graphs(const std::vector<ServedPackage>& models, const ModelUsage& usage);

  MetricsRegistry& metrics_;
  std::mutex mutex_;
  std::map<std::string, std::string> backends_;            // model\ncomponent\ndevice -> the backend published as 1
  std::map<std::string, std::set<std::string>> kernels_;   // ...\nmethod -> kernels published
  std::map<std::string, std::uint64_t> graph_events_;      // model\ncomponent\ndevice\nevent -> total published
};

}  // namespace vgen
