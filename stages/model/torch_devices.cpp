#include "stages/model/torch_devices.hpp"

#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

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

int default_intra_op_threads(std::size_t compute_threads) {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end == '\0' && n >= 1 && n <= 1024) return static_cast<int>(n);
  }
  const auto cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<std::size_t>(1, cores / std::max<std::size_t>(1, compute_threads)));
}

}  // namespace vgen
