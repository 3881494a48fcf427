#include "stages/model/torch_devices.hpp"

#include <doctest/doctest.h>

using namespace vgen;

TEST_CASE("discovered CUDA devices are numbered from 0 (none on a CPU-only machine); the LibTorch version is known") {
  const auto found = discover_cuda_devices();
  for (std::size_t i = 0; i < found.size(); ++i) CHECK(found[i].index == static_cast<int>(i));
  CHECK_FALSE(torch_version().empty());
}
