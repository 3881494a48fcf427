// Which scaled-dot-product attention kernels each loaded module runs: the process's record, per
// module file, device and method, for the log and /metrics (`vgen_attention_calls`). PyTorch
// picks a kernel per call (flash, memory-efficient, cuDNN, math; the CPU's own flash) from the
// inputs and model_backend.attention's order, and says nothing about it; AttentionWatch
// (attention_watch.hpp) counts the kernels one call ran and records them here.
// Which calls are watched: the first call of each (file, device, method) at each shape of its
// first input, up to kMaxWatchedShapes shapes; later calls run unwatched (no cost).
// Thread-safety: safe from any thread. No LibTorch in this header (api/ includes it). Nothing
// blocks but a short mutex; nothing to cancel.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

struct AttentionUse {
  std::filesystem::path file;  // the module's file (ComponentBackend::file of the component it serves)
  std::string device;          // LibTorch's spelling: "cpu", "cuda:0"
  std::string method;          // "forward_compact"
  std::string input_shape;     // the watched call's first input, "[1, 16, 3, 4, 4]"
  // Kernel -> calls in that one module call: "flash", "efficient", "cudnn", "math",
  // "flash_cpu", or PyTorch's own name for another ("fused_attention_overrideable").
  std::map<std::string, int> kernels;
  int sdpa_calls = 0;  // scaled_dot_product_attention calls in it (0: the module has none, or compiled it away)
};

inline constexpr std::size_t kMaxWatchedShapes = 8;

// Whether to watch this call (see above); true marks the shape watched, so a second caller
// at the same shape gets false.
bool attention_watch_wanted(const std::filesystem::path& file, std::string_view device, std::string_view method,
                            std::string_view input_shape);

// A watched call that failed: its shape may be watched again.
void attention_watch_abandoned(const std::filesystem::path& file, std::string_view device, std::string_view method,
                               std::string_view input_shape);

// Keeps the latest watched call per (file, device, method); logs (info) the first and any
// that ran other kernels than the one before.
void record_attention_use(const AttentionUse& use);
std::vector<AttentionUse> attention_uses();
void clear_attention_uses();  // tests

// "flash 30, efficient 30 of 60 attention calls", "no scaled-dot-product attention".
std::string describe_attention(const AttentionUse& use);

}  // namespace vgen
