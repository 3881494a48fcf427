// What the CUDA-graph decorator (stages/model/cuda_graph_calls.hpp) did, per component and
// device: captures, replays and failed captures, for the log and /metrics
// (`vgen_cuda_graph_events`, labelled model, component, device, event). A capture is logged
// (info: file, method, shapes, capture time); a failed capture once (warning: file, method,
// shapes and PyTorch's message), after which that call shape runs as usual.
// Thread-safety: safe from any thread. No LibTorch in this header (api/ includes it), and
// spdlog only in its source (the decorator's LibTorch source must not include it). Nothing
// blocks but a short mutex; nothing to cancel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

// Which component's module a decorator serves.
struct CudaGraphSite {
  std::filesystem::path package;  // the model package's folder (ModelPackage::dir)
  std::string component;          // "transformer"
  std::string device;             // "cuda:0"
  std::filesystem::path file;     // the component's file, for the log
};

struct CudaGraphUse {
  std::filesystem::path package;
  std::string component;
  std::string device;
  std::uint64_t captures = 0;  // graphs captured (each pins one call's activations while kept)
  std::uint64_t replays = 0;   // calls served by a replay
  std::uint64_t failures = 0;  // captures that failed (that call shape then runs as usual)
};

void record_cuda_graph_capture(const CudaGraphSite& site, std::string_view method, std::string_view shapes, double ms);
void record_cuda_graph_failure(const CudaGraphSite& site, std::string_view method, std::string_view shapes,
                               std::string_view why);
void record_cuda_graph_replay(const CudaGraphSite& site);
std::vector<CudaGraphUse> cuda_graph_uses();  // one per (package, component, device) seen
void clear_cuda_graph_uses();                 // tests

}  // namespace vgen
