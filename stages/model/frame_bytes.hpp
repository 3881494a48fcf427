// Frames as bytes: float pixels in [0, 1] (any layout, device and float dtype) to uint8 on the
// CPU, scaled by 255, rounded to nearest, clamped and contiguous. The one quantisation every
// stage that turns decoded or post-processed pixels into bytes uses (the encode stage's frames,
// a kept base clip, a streamed encode, a preview, the upscaler and the interpolator), so each
// path gives the same bytes for the same pixels. Cast to uint8 before the copy to the host: a
// quarter of float32's transfer.
// Thread-safety: pure. Blocking: waits for a device tensor's copy to the host (the current
// stream's); nothing to cancel.
#pragma once

#include <ATen/Tensor.h>

namespace vgen {

at::Tensor to_frame_bytes(const at::Tensor& unit);

}  // namespace vgen
