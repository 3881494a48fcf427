// ModelBackendOptions: the model backends' own settings (stages/model/model_backend.hpp), in a
// header without LibTorch so that api/config.hpp holds them as they are (config key
// "model_backend"). Applied process-wide by ComputeDevices (api/compute_devices.cpp) through
// stages/model/torch_devices.hpp before any module is called.
#pragma once

#include <optional>

namespace vgen {

struct ModelBackendOptions {
  // Whether LibTorch's TorchScript executor may fuse a CUDA graph's element-wise ops into
  // kernels it generates and compiles at run time (NNC through NVRTC). Measured on an H200
  // (Wan 2.1 1.3B bf16, 832x480x81, docs/PERFORMANCE.md): fused steps are 11 % faster (1.12 s
  // against 1.27 s; 16 % at batch 8, 33 frames), but the compile costs 11 to 13 s in the first
  // steps of every new shape in every process. It pays after about 80 steps of one shape, so
  // it suits a process that lives on and not a one-off render. Unset ("auto"): on for
  // `vgen serve` and `vgen worker` (they set it), off otherwise. CPU graphs are not fused by
  // LibTorch by default and are unaffected. Config key "model_backend.torchscript_gpu_fusion"
  // (true, false or "auto"). Process-wide: the last Runtime built sets it.
  std::optional<bool> torchscript_gpu_fusion;
};

}  // namespace vgen
