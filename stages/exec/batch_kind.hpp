// BatchKind: which of the Batcher's stages a group serves (stages/exec/batcher.hpp). Its own
// header so that code outside the stages (the auto-tuner's observer, api/runtime_tuning.hpp)
// can name it without LibTorch.
#pragma once

namespace vgen {

enum class BatchKind { preprocess, denoise, decode };

}  // namespace vgen
