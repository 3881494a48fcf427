// Test support: run one of tools/reference/*.py with the tooling Python (VGEN_PYTHON, set by
// CTest) and parse the JSON it prints. Returns nullopt when the suite was configured without
// the tooling Python, so callers can skip with a warning.
#pragma once

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>

namespace vgen::test {

inline std::optional<nlohmann::json> python_reference(const std::string& script, const std::string& args) {
  const char* py = std::getenv("VGEN_PYTHON");
  const char* src = std::getenv("VGEN_SOURCE_DIR");
  if (!py || !*py || !src) return std::nullopt;
  const std::string cmd = std::string(py) + " " + src + "/tools/reference/" + script + " " + args;
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  std::array<char, 4096> buf{};
  while (auto n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  REQUIRE_MESSAGE(pclose(pipe) == 0, "reference script failed: " << cmd);
  return nlohmann::json::parse(out);
}

// A fresh, uniquely named directory under the system temp directory.
inline std::filesystem::path temp_dir(const std::string& prefix) {
  auto d = std::filesystem::temp_directory_path() / (prefix + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace vgen::test
