#include "stages/model/torch_devices.hpp"

#include "runtime/errors.hpp"
#include "stages/model/model_backend_options.hpp"

#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/codegen/fuser/interface.h>

#include <algorithm>

#include <fstream>
#include <sstream>

namespace vgen {

std::vector<CudaDeviceInfo> discover_cuda_devices() {
  std::vector<CudaDeviceInfo> out;
  if (!torch::cuda::is_available()) return out;
  const auto n = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    std::size_t total = 0;
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) total = prop.totalGlobalMem;
    out.push_back({i, total});
  }
  return out;
}

std::string torch_version() { return TORCH_VERSION; }

void check_precision_on_device(std::string_view precision, int cuda_capability) {
  if (precision != "fp8" || cuda_capability < 0 || cuda_capability >= 89) return;
  throw_error(ErrorKind::invalid_argument,
              "precision: fp8 needs a CUDA device of compute capability 8.9 or newer (this one has " +
                  std::to_string(cuda_capability / 10) + "." + std::to_string(cuda_capability % 10) + "; use a float precision)");
}

int cuda_capability(int index) {
  if (!torch::cuda::is_available() || index < 0 || index >= static_cast<int>(torch::cuda::device_count())) return -1;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return -1;
  return prop.major * 10 + prop.minor;
}

bool devices_emulate_bf16(bool any_cuda, int cuda_capability, bool cpu_bf16_native) {
  if (any_cuda) return cuda_capability >= 0 && cuda_capability < 80;
  return !cpu_bf16_native;
}

bool cpu_computes_bf16_natively() {
  static const bool native = [] {
    std::ifstream info("/proc/cpuinfo");
    std::string line;
    while (std::getline(info, line)) {
      if (line.rfind("flags", 0) != 0 && line.rfind("Features", 0) != 0) continue;
      std::istringstream words(line.substr(line.find(':') == std::string::npos ? line.size() : line.find(':') + 1));
      for (std::string w; words >> w;)
        if (w == "avx512_bf16" || w == "amx_bf16" || w == "bf16") return true;
      return false;  // the first processor's flags speak for all
    }
    return false;
  }();
  return native;
}

namespace {
const std::vector<std::pair<std::string, at::SDPBackend>>& sdp_backends() {
  static const std::vector<std::pair<std::string, at::SDPBackend>> names{
      {"flash", at::SDPBackend::flash_attention}, {"efficient", at::SDPBackend::efficient_attention},
      {"math", at::SDPBackend::math}, {"cudnn", at::SDPBackend::cudnn_attention}};
  return names;
}
}  // namespace

void set_attention_priority(const std::vector<std::string>& first) {
  std::vector<int64_t> order;
  for (const auto& name : attention_priority_order(first)) {
    const auto& all = sdp_backends();
    const auto it = std::find_if(all.begin(), all.end(), [&](const auto& b) { return b.first == name; });
    if (it == all.end()) throw_error(ErrorKind::invalid_argument, "model_backend.attention: unknown attention backend '" + name + "'");
    order.push_back(static_cast<int64_t>(it->second));
  }
  // at::Context wants every backend once: the one this list does not name goes last.
  order.push_back(static_cast<int64_t>(at::SDPBackend::overrideable));
  at::globalContext().setSDPPriorityOrder(order);
}

std::vector<std::string> attention_priority() {
  std::vector<std::string> out;
  for (const auto b : at::globalContext().sDPPriorityOrder())
    for (const auto& [name, backend] : sdp_backends())
      if (backend == b) out.push_back(name);
  return out;
}

void set_intra_op_threads(int n) { at::set_num_threads(n < 1 ? 1 : n); }

// Both of TorchScript's fusers (the tensor-expression one, the default, and the legacy one)
// ask canFuseOnGPU() before fusing anything on a CUDA device.
void set_torchscript_gpu_fusion(bool on) { torch::jit::overrideCanFuseOnGPU(on); }

}  // namespace vgen
