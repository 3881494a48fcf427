// LoRA merge cost (bench/README.md): one merge of a rank-R LoRA on every attention and FFN
// linear of a package's transformer, and the steady-state cost of alternating between two
// LoRAs with the merged-variant LRU on (budget: both fit) and off (budget 0).
//   bench_lora PACKAGE_DIR [RANK=32] [ROUNDS=10]   -> one JSON line
#include "stages/model/lora_variants.hpp"
#include "stages/model/model_backend.hpp"
#include "stages/model/model_package.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>

using namespace vgen;
namespace fs = std::filesystem;

namespace {

std::string bytes_of(const at::Tensor& t) {
  auto c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.numel() * c.element_size()));
}

// A random rank-`rank` LoRA (diffusers layout) on every 2-D attention/FFN weight.
std::size_t write_lora(const fs::path& file, const Module& m, std::int64_t rank, std::uint64_t seed) {
  static const std::regex linear(R"(^transformer\.(blocks\.\d+\.(attn[12]\.to_(q|k|v|out\.0)|ffn\.net\.(0\.proj|2)))\.weight$)");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<SafetensorsEntry> entries;
  std::smatch match;
  for (const auto& [name, w] : m.parameters()) {
    if (!std::regex_match(name, match, linear) || w.dim() != 2) continue;
    const auto out = w.size(0), in = w.size(1);
    entries.push_back({"transformer." + match[1].str() + ".lora_A.weight", "F32", {rank, in}, bytes_of(at::randn({rank, in}, gen) * 0.01)});
    entries.push_back({"transformer." + match[1].str() + ".lora_B.weight", "F32", {out, rank}, bytes_of(at::randn({out, rank}, gen) * 0.01)});
  }
  write_safetensors(file, entries);
  return entries.size() / 2;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_lora PACKAGE_DIR [RANK] [ROUNDS]\n");
    return 2;
  }
  const auto pkg = load_model_package(argv[1]);
  const std::int64_t rank = argc > 2 ? std::stoll(argv[2]) : 32;
  const int rounds = argc > 3 ? std::stoi(argv[3]) : 10;
  const auto& c = pkg.component("transformer");
  auto base = ModuleCache::instance().get("torchscript", c.file, "cpu", parse_dtype(c.dtype));
  const auto dir = fs::temp_directory_path() / "vgen-bench-lora";
  fs::create_directories(dir);
  const auto layers = write_lora(dir / "a.safetensors", *base, rank, 1);
  write_lora(dir / "b.safetensors", *base, rank, 2);
  const std::vector<LoraChoice> a{{LoraFile::open(dir / "a.safetensors"), 1.0}}, b{{LoraFile::open(dir / "b.safetensors"), 1.0}};

  // One merge (files already hashed and cached by the OS): median of `rounds`.
  std::vector<double> merges;
  std::size_t bytes = 0;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto merged = merge_loras(*base, a);
    auto variant = base->with_parameters(merged);
    merges.push_back(ms_since(t0));
    bytes = 0;
    for (const auto& [_, t] : merged) bytes += static_cast<std::size_t>(t.numel() * t.element_size());
  }
  std::sort(merges.begin(), merges.end());
  // Alternating A, B, A, B, ...: the per-switch cost with the LRU on and off.
  auto alternate = [&](std::size_t budget) {
    LoraVariants lru(budget);
    lru.get(base, "a", a);
    lru.get(base, "b", b);  // warm
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < rounds; ++i) {
      lru.get(base, "a", a);
      lru.get(base, "b", b);
    }
    return ms_since(t0) / (2.0 * rounds);
  };
  const double on = alternate(4 * bytes), off = alternate(0);
  std::printf("{\"bench\":\"lora\",\"package\":\"%s\",\"rank\":%lld,\"layers\":%zu,\"merged_mb\":%.2f,"
              "\"merge_ms_median\":%.3f,\"switch_ms_lru_on\":%.4f,\"switch_ms_lru_off\":%.3f,\"rounds\":%d}\n",
              argv[1], static_cast<long long>(rank), layers, bytes / 1048576.0, merges[merges.size() / 2], on, off, rounds);
  fs::remove_all(dir);
  return 0;
}
