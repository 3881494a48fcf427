#include "stages/model/frame_bytes.hpp"

#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using namespace vgen;

TEST_CASE("pixels in [0, 1] become bytes rounded to nearest, out-of-range values clamped, contiguous on the CPU") {
  const auto unit = at::tensor(std::vector<float>{-0.5f, 0.0f, 0.3f / 255, 1.49f / 255, 1.51f / 255, 100.2f / 255, 254.7f / 255, 1.0f, 1.7f});
  const auto bytes = to_frame_bytes(unit);
  CHECK((bytes.scalar_type() == at::kByte));
  CHECK(bytes.device().is_cpu());
  const std::vector<std::uint8_t> got(bytes.data_ptr<std::uint8_t>(), bytes.data_ptr<std::uint8_t>() + bytes.numel());
  CHECK(got == std::vector<std::uint8_t>{0, 0, 0, 1, 2, 100, 255, 255, 255});
}

TEST_CASE("a strided view (frames [f, H, W, 3] permuted from [f, 3, H, W]) comes out packed in its logical order") {
  const auto chw = at::rand({2, 3, 4, 5});
  const auto hwc = chw.permute({0, 2, 3, 1});
  REQUIRE_FALSE(hwc.is_contiguous());
  const auto bytes = to_frame_bytes(hwc);
  CHECK(bytes.is_contiguous());
  CHECK(bytes.sizes().vec() == hwc.sizes().vec());
  CHECK(at::equal(bytes, hwc.contiguous().mul(255.0).round().clamp(0, 255).to(at::kByte)));
  // bf16 pixels: the same operations in the tensor's own dtype.
  const auto half = hwc.to(at::kBFloat16);
  CHECK(at::equal(to_frame_bytes(half), half.mul(255.0).round().clamp(0, 255).to(at::kByte).contiguous()));
}
