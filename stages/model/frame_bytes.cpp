#include "stages/model/frame_bytes.hpp"

#include <ATen/ATen.h>

namespace vgen {

at::Tensor to_frame_bytes(const at::Tensor& unit) {
  return unit.mul(255.0).round().clamp(0, 255).to(at::kByte).to(at::kCPU).contiguous();
}

}  // namespace vgen
