#include "stages/model/torch_devices.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace vgen;

TEST_CASE("discovered CUDA devices are numbered from 0 (none on a CPU-only machine); the LibTorch version is known") {
  const auto found = discover_cuda_devices();
  for (std::size_t i = 0; i < found.size(); ++i) CHECK(found[i].index == static_cast<int>(i));
  CHECK_FALSE(torch_version().empty());
}

TEST_CASE("fp8 is refused on a CUDA device below capability 8.9, naming the field precision; CPU runs every precision") {
  auto device_error = [](std::string_view precision, int capability) {
    try {
      check_precision_on_device(precision, capability);
      return std::string();
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);  // HTTP 422 / exit 2 through the usual mapping
      return std::string(e.what());
    }
  };
  CHECK(device_error("fp8", -1).empty());  // CPU: the dequantized path
  CHECK(device_error("fp8", 89).empty());  // Ada
  CHECK(device_error("fp8", 90).empty());  // Hopper
  CHECK(device_error("fp8", 120).empty());
  CHECK(device_error("fp8", 86) ==
        "precision: fp8 needs a CUDA device of compute capability 8.9 or newer (this one has 8.6; use a float precision)");
  CHECK(device_error("fp8", 80).find("precision: ") == 0);  // A100
  CHECK(device_error("fp8", 75).find("(this one has 7.5;") != std::string::npos);
  for (const auto* other : {"float32", "bfloat16", "int8"}) CHECK(device_error(other, 75).empty());
  // This machine's own devices: a capability for each discovered one, none past the last.
  const auto found = discover_cuda_devices();
  for (std::size_t i = 0; i < found.size(); ++i) CHECK(cuda_capability(static_cast<int>(i)) >= 10);
  CHECK(cuda_capability(static_cast<int>(found.size())) == -1);
  CHECK(cuda_capability(-1) == -1);
}

TEST_CASE("bf16 counts as emulated on a CUDA device before 8.0 and on a CPU without native bf16") {
  CHECK(devices_emulate_bf16(true, 75, true));    // Turing
  CHECK(devices_emulate_bf16(true, 70, false));   // Volta: the CPU's flags do not matter
  CHECK_FALSE(devices_emulate_bf16(true, 80, false));  // Ampere
  CHECK_FALSE(devices_emulate_bf16(true, 90, true));   // Hopper
  CHECK_FALSE(devices_emulate_bf16(true, -1, false));  // capability unknown: the package's default stands
  CHECK(devices_emulate_bf16(false, -1, false));       // CPU only, no AVX-512 BF16 / AMX
  CHECK_FALSE(devices_emulate_bf16(false, -1, true));
}

TEST_CASE("set_attention_priority: the named backends first, the rest in PyTorch's order; empty restores PyTorch's") {
  const std::vector<std::string> pytorch{"flash", "efficient", "math", "cudnn"};
  CHECK(attention_priority() == pytorch);  // at::Context's own default, read back (nothing set it yet)
  set_attention_priority({"cudnn"});
  CHECK(attention_priority() == std::vector<std::string>{"cudnn", "flash", "efficient", "math"});
  set_attention_priority({"efficient", "cudnn"});
  CHECK(attention_priority() == std::vector<std::string>{"efficient", "cudnn", "flash", "math"});
  CHECK_THROWS_AS(set_attention_priority({"sage"}), Error);
  CHECK(attention_priority() == std::vector<std::string>{"efficient", "cudnn", "flash", "math"});  // unchanged by the refusal
  set_attention_priority({});
  CHECK(attention_priority() == pytorch);
}
