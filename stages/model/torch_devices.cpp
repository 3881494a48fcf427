#include "stages/model/torch_devices.hpp"

#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/codegen/fuser/interface.h>

#include <algorithm>

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

void set_intra_op_threads(int n) { at::set_num_threads(n < 1 ? 1 : n); }

// Both of TorchScript's fusers (the tensor-expression one, the default, and the legacy one)
// ask canFuseOnGPU() before fusing anything on a CUDA device.
void set_torchscript_gpu_fusion(bool on) { torch::jit::overrideCanFuseOnGPU(on); }

}  // namespace vgen
