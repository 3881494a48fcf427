#include "stages/media/x264_cpu.hpp"

#include <spdlog/spdlog.h>

#include <dlfcn.h>

namespace vgen {
namespace {

using CpuDetect = std::uint32_t (*)();

// The running process's libx264: linked through libavcodec (global scope), else a copy a
// host loaded privately (RTLD_NOLOAD finds it without loading another).
CpuDetect find_cpu_detect() {
  if (void* f = dlsym(RTLD_DEFAULT, "x264_cpu_detect")) return reinterpret_cast<CpuDetect>(f);
  for (const char* soname : {"libx264.so.164", "libx264.so"}) {
    if (void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD)) {
      void* f = dlsym(handle, "x264_cpu_detect");
      dlclose(handle);  // RTLD_NOLOAD took a reference; the library stays loaded by its owner
      if (f) return reinterpret_cast<CpuDetect>(f);
    }
  }
  return nullptr;
}

}  // namespace

std::optional<std::uint32_t> x264_detected_cpu_flags() {
  static const CpuDetect detect = find_cpu_detect();
  if (!detect) return std::nullopt;
  return detect();
}

const std::string& x264_asm_option() {
  static const std::string option = [] {
    const auto flags = x264_detected_cpu_flags();
    if (!flags) {
      spdlog::warn("encode: libx264's x264_cpu_detect was not found, so its AVX-512 kernels stay on; "
                   "the same mp4 job may then write different bytes now and then");
      return std::string();
    }
    if (!(*flags & kX264CpuAvx512)) return std::string();
    return "asm=" + std::to_string(*flags & ~kX264CpuAvx512);
  }();
  return option;
}

}  // namespace vgen
