#include "stages/model/attention_watch.hpp"

#include "stages/model/attention_uses.hpp"

#include <ATen/ATen.h>
#include <doctest/doctest.h>  // after ATen: its CHECK replaces glog's

#include <stdexcept>

using namespace vgen;

namespace {

at::Tensor qkv(std::int64_t tokens) { return at::randn({1, 2, tokens, 16}); }

const AttentionUse* use_of(const std::vector<AttentionUse>& all, const std::string& method) {
  for (const auto& u : all)
    if (u.method == method) return &u;
  return nullptr;
}

// softmax(q k^T / sqrt(d)) v written out: attention no fused kernel serves.
at::Tensor unfused(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::softmax(at::matmul(q, k.transpose(-2, -1)) / 4.0, -1).matmul(v);
}

}  // namespace

TEST_CASE("attention_kernel_of: PyTorch's kernel ops by short name, others by their own, non-kernels empty") {
  CHECK(attention_kernel_of("aten::_scaled_dot_product_flash_attention") == "flash");
  CHECK(attention_kernel_of("aten::_scaled_dot_product_flash_attention_for_cpu") == "flash_cpu");
  CHECK(attention_kernel_of("aten::_scaled_dot_product_efficient_attention") == "efficient");
  CHECK(attention_kernel_of("aten::_scaled_dot_product_cudnn_attention") == "cudnn");
  CHECK(attention_kernel_of("aten::_scaled_dot_product_attention_math") == "math");
  CHECK(attention_kernel_of("aten::_scaled_dot_product_fused_attention_overrideable") == "fused_attention_overrideable");
  CHECK(attention_kernel_of("aten::scaled_dot_product_attention").empty());  // the choice, not a kernel
  CHECK(attention_kernel_of("aten::softmax").empty());
}

TEST_CASE("AttentionWatch counts the kernels a call runs, the first call at a shape only, and records on finish") {
  clear_attention_uses();
  const std::vector<at::Tensor> shape_a{at::zeros({1, 4, 2})}, shape_b{at::zeros({1, 4, 3})};
  {
    AttentionWatch watch("/p/m.pt", c10::Device(c10::kCPU), "forward", shape_a);
    REQUIRE(watch.watching());
    for (int i = 0; i < 3; ++i) at::scaled_dot_product_attention(qkv(8), qkv(8), qkv(8));
    watch.finish();
  }
  auto all = attention_uses();
  REQUIRE(all.size() == 1);
  const auto& u = all.front();
  CHECK(u.device == "cpu");
  CHECK(u.input_shape == "[1, 4, 2]");
  CHECK(u.sdpa_calls == 3);
  // Every call reached a kernel, and on a CPU it is one of the CPU's (flash for CPU, or math).
  int kernels = 0;
  for (const auto& [name, calls] : u.kernels) {
    CHECK((name == "flash_cpu" || name == "math"));
    kernels += calls;
  }
  CHECK(kernels == 3);

  {  // the same shape again: not watched, nothing recorded, nothing counted
    AttentionWatch again("/p/m.pt", c10::Device(c10::kCPU), "forward", shape_a);
    CHECK_FALSE(again.watching());
    at::scaled_dot_product_attention(qkv(8), qkv(8), qkv(8));
    again.finish();
  }
  CHECK(attention_uses().front().sdpa_calls == 3);

  {  // a forced kernel is named: math
    AttentionWatch watch("/p/m.pt", c10::Device(c10::kCPU), "math", shape_a);
    REQUIRE(watch.watching());
    at::_scaled_dot_product_attention_math(qkv(8), qkv(8), qkv(8));
    watch.finish();
  }
  all = attention_uses();
  REQUIRE(use_of(all, "math"));
  CHECK(use_of(all, "math")->kernels == std::map<std::string, int>{{"math", 1}});

  {  // attention written out is no fused attention; and nothing of the calls before leaks in
    AttentionWatch watch("/p/m.pt", c10::Device(c10::kCPU), "unfused", shape_b);
    REQUIRE(watch.watching());
    unfused(qkv(8), qkv(8), qkv(8));
    watch.finish();
  }
  all = attention_uses();
  REQUIRE(use_of(all, "unfused"));
  CHECK(use_of(all, "unfused")->sdpa_calls == 0);
  CHECK(use_of(all, "unfused")->kernels.empty());
  CHECK(describe_attention(*use_of(all, "unfused")) == "no scaled-dot-product attention");
  clear_attention_uses();
}

TEST_CASE("AttentionWatch: a call that throws records nothing and is watched again; watches nest into the outer one") {
  clear_attention_uses();
  const std::vector<at::Tensor> shape{at::zeros({2})};
  try {
    AttentionWatch watch("/p/m.pt", c10::Device(c10::kCPU), "forward", shape);
    REQUIRE(watch.watching());
    at::scaled_dot_product_attention(qkv(4), qkv(4), qkv(4));
    throw std::runtime_error("the module failed");
  } catch (const std::runtime_error&) {
  }
  CHECK(attention_uses().empty());
  {
    AttentionWatch outer("/p/m.pt", c10::Device(c10::kCPU), "forward", shape);
    REQUIRE(outer.watching());  // the failed call gave its shape back
    {
      AttentionWatch inner("/p/inner.pt", c10::Device(c10::kCPU), "forward", shape);
      CHECK_FALSE(inner.watching());
      at::scaled_dot_product_attention(qkv(4), qkv(4), qkv(4));
      inner.finish();
    }
    at::scaled_dot_product_attention(qkv(4), qkv(4), qkv(4));
    outer.finish();
  }
  const auto all = attention_uses();
  REQUIRE(all.size() == 1);
  CHECK(all.front().file == "/p/m.pt");
  CHECK(all.front().sdpa_calls == 2);
  clear_attention_uses();
}
