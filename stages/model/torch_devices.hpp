// Device facts that only LibTorch (and the CUDA runtime) can tell: how many CUDA devices there
// are and how much memory each has. Plugs into vgen::parse_device_list as its CudaDiscovery.
// On a machine without a GPU (or a CPU-only LibTorch) it reports no CUDA devices.
// Thread-safety: safe from any thread.
#pragma once

#include "runtime/device_pool.hpp"

#include <string>

namespace vgen {

std::vector<CudaDeviceInfo> discover_cuda_devices();
std::string torch_version();

// LibTorch's intra-op threads for the calling thread (at::set_num_threads); n >= 1.
void set_intra_op_threads(int n);

// Whether TorchScript may fuse CUDA graphs (ModelBackendOptions::torchscript_gpu_fusion says
// why it is off by default). Process-wide; takes effect for graphs optimised after the call.
void set_torchscript_gpu_fusion(bool on);

}  // namespace vgen
