// x264_cpu: the flags vgen gives libx264 are the ones it detects, less AVX-512 only.
#include "stages/media/x264_cpu.hpp"

#include "stages/media/encode.hpp"
#include "stages/media/frames.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace vgen;

namespace {

// What x264_cpu_detect needs to report AVX-512: F, CD, BW, DQ and VL (x264's common/cpu.c),
// with the OS saving ZMM state (Linux does wherever the CPU has it).
bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
}

}  // namespace

TEST_CASE("libx264 is found in the process (linked through libavcodec) and asked for its flags") {
  // Encoding once first is not needed: libavcodec's link brings libx264 in at start-up.
  const auto flags = x264_detected_cpu_flags();
  REQUIRE(flags.has_value());
  CHECK(*flags != 0);
  CHECK(((*flags & kX264CpuAvx512) != 0) == cpu_has_avx512());
}

TEST_CASE("the asm option keeps every detected flag but AVX-512, and is empty without AVX-512") {
  const auto flags = x264_detected_cpu_flags();
  REQUIRE(flags.has_value());
  const std::string& option = x264_asm_option();
  if (*flags & kX264CpuAvx512) {
    REQUIRE(option.rfind("asm=", 0) == 0);
    const auto asked = static_cast<std::uint32_t>(std::stoul(option.substr(4)));
    CHECK((asked & kX264CpuAvx512) == 0);
    CHECK(asked == (*flags & ~kX264CpuAvx512));
  } else {
    CHECK(option.empty());
  }
  CHECK(&x264_asm_option() == &option);  // computed once
}

TEST_CASE("an mp4 encode with the option set still opens libx264 and writes a stream") {
  const auto frames = make_test_pattern(64, 48, 9, 16.0, 1);
  EncodeOptions options;
  options.format = "mp4";
  const auto first = encode_to_memory(frames, options);
  CHECK(first.size() > 100);
  CHECK(encode_to_memory(frames, options) == first);
}
