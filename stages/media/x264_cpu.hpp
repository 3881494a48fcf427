// Which of libx264's CPU kernels vgen lets it use: every one it detects except AVX-512.
//
// Why: Debian bookworm's libx264 (0.164.3095) with its AVX-512 kernels does not always encode
// the same frames to the same bytes in a long-lived process. Measured on this project's
// machine (AMD EPYC, AVX-512): one Runtime rendering the same job 600 times wrote 1 to 308
// outputs that differed from the first in 4 of 9 runs (8 bytes of the first IDR slice; the
// x264 input planes were identical, checked by hash); with the flags below, 0 of 8 runs. In a
// process that only encodes, the AVX-512 path was stable (2,000 encodes), and MALLOC_PERTURB_
// made it stable too, which points at a read of memory that x264 did not write. The AVX2 path
// gives the same bytes as the AVX-512 path when the latter is right, so nothing else changes.
//
// x264_asm_option() asks the loaded libx264 (x264_cpu_detect, exported) what it would use and
// returns "asm=<those flags without X264_CPU_AVX512>" for the "x264-params" encoder option, or
// an empty string where there is nothing to take away (no AVX-512) or no libx264 symbol to ask
// (then it warns once: outputs may differ between runs).
//
// Thread-safety: computed once (a function-local static) and then read-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace vgen {

// libx264's CPU flags as x264_cpu_detect() reports them; nullopt when no libx264 is loaded.
std::optional<std::uint32_t> x264_detected_cpu_flags();

// X264_CPU_AVX512 in x264.h (API 152 and later).
inline constexpr std::uint32_t kX264CpuAvx512 = 1u << 16;

// "asm=<detected flags without AVX-512>", or "" (see above).
const std::string& x264_asm_option();

}  // namespace vgen
