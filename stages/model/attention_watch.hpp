// AttentionWatch: counts the scaled-dot-product attention kernels one module call runs on the
// calling thread, when attention_uses.hpp's attention_watch_wanted says the call is worth it
// (the first at each shape), and records them there on finish(). It installs a thread-local
// LibTorch RecordFunction callback for the call's duration (every op then passes through it:
// a few per cent of that one call), none otherwise. TorchScriptModule::call and
// AotiModule::call (model_backend.cpp) open one around each call.
// Ownership: one per call, on the stack. Thread-safety: its own thread only; watches nested on
// one thread count in the outermost. Not cancellable; a call that throws records nothing (and
// its shape is watched again next time).
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

class AttentionWatch {
 public:
  AttentionWatch(const std::filesystem::path& file, c10::Device device, std::string_view method,
                 const std::vector<at::Tensor>& inputs);
  ~AttentionWatch();
  AttentionWatch(const AttentionWatch&) = delete;
  AttentionWatch& operator=(const AttentionWatch&) = delete;

  bool watching() const noexcept { return handle_ != 0; }
  void finish();  // the call returned: records what it ran (once; nothing when not watching)

 private:
  std::uint64_t handle_ = 0;  // the RecordFunction callback's, 0 when not watching
  std::filesystem::path file_;
  std::string device_, method_, shape_;
};

// The short name of a scaled-dot-product kernel op ("aten::_scaled_dot_product_flash_attention"
// -> "flash"), its own suffix for one not known here, "" for an op that is no such kernel. Pure.
std::string attention_kernel_of(std::string_view op_name);

}  // namespace vgen
