// Device facts that only LibTorch (and the CUDA runtime) can tell: how many CUDA devices there
// are and how much memory each has. Plugs into vgen::parse_device_list as its CudaDiscovery.
// On a machine without a GPU (or a CPU-only LibTorch) it reports no CUDA devices.
// Thread-safety: safe from any thread.
#pragma once

#include "runtime/device_pool.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace vgen {

std::vector<CudaDeviceInfo> discover_cuda_devices();
std::string torch_version();

// Compute capability of CUDA device `index` as major * 10 + minor (90 for an H100), or -1 when
// there is no such device (or no CUDA): what fp8 jobs are checked against (job_spec.hpp).
int cuda_capability(int index);

// Error(invalid_argument) naming "precision" (exit 2 / HTTP 422) when a device cannot run the
// job's precision: fp8 on a CUDA device of capability below 8.9 (its exported module's CUDA
// branch calls torch._scaled_mm on e4m3 operands, which needs Ada or Hopper). cuda_capability
// is that of the lowest CUDA device that may run the job (as cuda_capability returns), -1 for
// none (CPU runs the dequantized path). Pure: tested with made-up capabilities.
void check_precision_on_device(std::string_view precision, int cuda_capability);

// Whether this machine's CPU computes bf16 natively: x86 AVX-512 BF16 or AMX-BF16, aarch64's
// BF16 extension (Linux: /proc/cpuinfo's flags). Elsewhere, bf16 matrix products are emulated.
bool cpu_computes_bf16_natively();

// Whether a set of devices would emulate bf16 (so a package's bf16 default is worse than its float
// weights there): with CUDA devices, when the lowest capability (cuda_capability as above, -1
// unknown: not emulated) is below 8.0 (before Ampere, bf16 matrix products have no tensor-core
// path); CPU-only, when the CPU lacks native bf16 (`cpu_bf16_native`). Pure: tested with made-up
// devices.
bool devices_emulate_bf16(bool any_cuda, int cuda_capability, bool cpu_bf16_native);

// LibTorch's intra-op threads for the calling thread (at::set_num_threads); n >= 1.
void set_intra_op_threads(int n);

// The order in which PyTorch tries its scaled-dot-product attention kernels on CUDA devices
// (at::Context's SDP priority order): `first` (names from model_backend_options.hpp's
// attention_backend_names, checked there) in front, the others after in PyTorch's order;
// empty restores PyTorch's. Process-wide, for calls that choose a kernel after it (every
// SDPA call chooses anew). Error(invalid_argument) for an unknown name.
void set_attention_priority(const std::vector<std::string>& first);
// The order now in force, by those names ("overrideable", for other device types, left out).
std::vector<std::string> attention_priority();

// Whether TorchScript may fuse CUDA graphs (ModelBackendOptions::torchscript_gpu_fusion says
// why it is off by default). Process-wide; takes effect for graphs optimised after the call.
void set_torchscript_gpu_fusion(bool on);

}  // namespace vgen
