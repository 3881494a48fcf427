#include "stages/model/lora_variants.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "runtime/errors.hpp"
#include "tests/support/temp_dir.hpp"

#include <cstring>

#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;

namespace {

// A module that is only its parameters: forward returns x @ w^T for "net.w".
class ParamModule final : public Module {
 public:
  explicit ParamModule(std::map<std::string, at::Tensor> p) : params_(std::move(p)) {}
  at::Tensor call(std::string_view, const std::vector<at::Tensor>& in) const override {
    return at::matmul(in[0], params_.at("net.w").t());
  }
  c10::Device device() const override { return c10::kCPU; }
  c10::ScalarType dtype() const override { return at::kFloat; }
  std::map<std::string, at::Tensor> parameters() const override { return params_; }
  std::shared_ptr<const Module> with_parameters(const std::map<std::string, at::Tensor>& r) const override {
    auto p = params_;
    for (const auto& [k, v] : r) p.at(k) = v;
    return std::make_shared<ParamModule>(p);
  }

 private:
  std::map<std::string, at::Tensor> params_;
};

std::string bytes_of(const at::Tensor& t) {
  auto c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.numel() * c.element_size()));
}

std::shared_ptr<const LoraFile> write_lora(const test::TempDir& dir, const std::string& name, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto up = at::randn({8, 2}, gen), down = at::randn({2, 8}, gen);
  write_safetensors(dir / (name + ".safetensors"),
                    {{"transformer.w.lora_B.weight", "F32", {8, 2}, bytes_of(up)}, {"transformer.w.lora_A.weight", "F32", {2, 8}, bytes_of(down)}});
  return LoraFile::open(dir / (name + ".safetensors"));
}

}  // namespace

TEST_CASE("a popular set merges once; the budget evicts the least recently used; 0 turns caching off") {
  test::TempDir dir;
  auto base_w = at::randn({8, 8});
  const auto before = base_w.clone();
  auto base = std::make_shared<ParamModule>(std::map<std::string, at::Tensor>{{"net.w", base_w}, {"net.b", at::zeros({8})}});
  const std::vector<LoraChoice> a{{write_lora(dir, "a", 1), 1.0}}, b{{write_lora(dir, "b", 2), 0.5}};
  const std::size_t one = 8 * 8 * 4;  // bytes of one merged variant (net.w only)

  LoraVariants lru(one);  // room for one variant
  auto va = lru.get(base, "a", a);
  CHECK(lru.get(base, "a", a) == va);  // a hit: the same instance
  CHECK(lru.stats().merges == 1);
  CHECK(lru.stats().hits == 1);
  auto vb = lru.get(base, "b", b);  // evicts a
  CHECK(lru.stats().evictions == 1);
  CHECK(lru.stats().bytes == one);
  CHECK(lru.get(base, "a", a) != va);  // merged again
  CHECK(lru.stats().merges == 3);
  // The variants differ from the base and from each other; the base is untouched.
  CHECK(!at::equal(va->parameters().at("net.w"), base_w));
  CHECK(!at::equal(va->parameters().at("net.w"), vb->parameters().at("net.w")));
  CHECK(at::equal(base->parameters().at("net.w"), before));
  CHECK(va->parameters().at("net.b").is_same(base->parameters().at("net.b")));  // untouched tensors shared
  CHECK(lru.get(base, "", {}) == base);

  LoraVariants off(0);
  off.get(base, "a", a);
  off.get(base, "a", a);
  CHECK(off.stats().merges == 2);
  CHECK(off.stats().entries == 0);
}

TEST_CASE("the merge is W + scale * up @ down * alpha / rank, summed over the set") {
  test::TempDir dir;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto w = at::randn({8, 8}, gen), up = at::randn({8, 2}, gen), down = at::randn({2, 8}, gen), diffb = at::randn({8}, gen);
  auto alpha = at::full({}, 1.0);
  // The original layout: lora_up/lora_down with alpha 1 (rank 2: factor 0.5) and a bias delta.
  write_safetensors(dir / "c.safetensors", {{"diffusion_model.w.lora_up.weight", "F32", {8, 2}, bytes_of(up)},
                                            {"diffusion_model.w.lora_down.weight", "F32", {2, 8}, bytes_of(down)},
                                            {"diffusion_model.w.alpha", "F32", {}, bytes_of(alpha)},
                                            {"diffusion_model.w.diff_b", "F32", {8}, bytes_of(diffb)}});
  auto base = std::make_shared<ParamModule>(std::map<std::string, at::Tensor>{{"net.w", w}, {"net.b", at::zeros({8})}});
  // diff_b goes to "w.bias", which this module lacks: named.
  CHECK_THROWS_WITH_AS(merge_loras(*base, {{LoraFile::open(dir / "c.safetensors"), 1.0}}),
                       doctest::Contains("key 'diffusion_model.w.diff_b': matches no layer of the model ('w.bias')"), Error);
  auto with_bias = std::make_shared<ParamModule>(std::map<std::string, at::Tensor>{{"net.w", w}, {"net.w.bias", at::zeros({8})}});
  // (a parameter literally named "net.w.bias" stands in for a Linear's bias here)
  auto a = write_lora(dir, "a", 3);
  auto merged = merge_loras(*with_bias, {{LoraFile::open(dir / "c.safetensors"), 0.8}, {a, -0.3}});
  auto a_up = at::empty({8, 2}), a_down = at::empty({2, 8});
  {
    auto g = at::make_generator<at::CPUGeneratorImpl>(3);
    a_up = at::randn({8, 2}, g);
    a_down = at::randn({2, 8}, g);
  }
  const auto expect = w + 0.8 * at::matmul(up, down) * 0.5 + -0.3 * at::matmul(a_up, a_down);
  CHECK((merged.at("net.w") - expect).abs().max().item<double>() < 1e-5);
  CHECK((merged.at("net.w.bias") - 0.8 * diffb).abs().max().item<double>() < 1e-6);
}
