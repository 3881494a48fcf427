// Test support: a float32 tensor from the raw little-endian file a Python reference wrote (its
// shape from the reference's JSON), and the largest absolute difference of two tensors.
// Header-only; includes ATen (include it before doctest in a test that uses LibTorch).
#pragma once

#include <ATen/ATen.h>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace vgen::test {

inline std::vector<char> read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline at::Tensor read_f32(const std::string& file, const nlohmann::json& shape) {
  const auto bytes = read_bytes(file);
  std::vector<int64_t> dims(shape.begin(), shape.end());
  auto t = at::empty(dims, at::kFloat);
  REQUIRE(bytes.size() == static_cast<std::size_t>(t.numel()) * sizeof(float));
  std::memcpy(t.data_ptr<float>(), bytes.data(), bytes.size());
  return t;
}

inline double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace vgen::test
