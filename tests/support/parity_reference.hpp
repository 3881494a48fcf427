// Test support: the reference a family's parity fixture wrote (tools/reference/<family>_parity.py
// via vgen_parity_fixture in tests/CMakeLists.txt): parity.json (`info`) and the tensors file it
// names, loaded on first use. parity_reference_or_skip(env) reads the directory CTest passes in
// `env` once per process; without it (a build without the tooling Python) it warns and returns
// nullptr so the case skips. LibTorch: include only in tests that link it.
#pragma once

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

namespace vgen::test {

struct ParityReference {
  nlohmann::json info;
  std::optional<torch::jit::Module> tensors;
  at::Tensor get(const std::string& name) {
    if (!tensors) tensors = torch::jit::load(info["reference"].get<std::string>());
    return tensors->attr(name).toTensor();
  }
};

inline ParityReference* parity_reference_or_skip(const std::string& env) {
  static std::map<std::string, std::optional<ParityReference>> loaded;  // by variable: tried once
  auto [it, first] = loaded.try_emplace(env);
  if (first) {
    const char* dir = std::getenv(env.c_str());
    if (dir && *dir && std::filesystem::is_regular_file(std::filesystem::path(dir) / "parity.json")) {
      std::ifstream in(std::filesystem::path(dir) / "parity.json");
      it->second = ParityReference{nlohmann::json::parse(in), std::nullopt};
    }
  }
  if (!it->second) {
    const std::string why = env + " not set (no tooling Python): skipped";
    WARN_MESSAGE(false, why);
  }
  return it->second ? &*it->second : nullptr;
}

}  // namespace vgen::test
