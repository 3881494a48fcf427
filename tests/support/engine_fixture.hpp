// Test support for cases that run a vgen::Runtime on the tiny random Wan package (written by the
// CTest fixture stages.wan_parity_reference, which sets VGEN_WAN_PARITY_DIR): the package, a
// small fixed configuration, a job spec and a file's bytes. Header-only; no state. A test file
// says `using namespace vgen::test::engine;`.
#pragma once

#include "api/engine.hpp"
#include "tests/support/python_reference.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace vgen::test::engine {

// The tiny package, or empty after warning that the case is skipped (no tooling Python).
inline std::filesystem::path package_or_skip() {
  const char* dir = std::getenv("VGEN_WAN_PARITY_DIR");
  if (dir && *dir && std::filesystem::is_regular_file(std::filesystem::path(dir) / "pkg" / "manifest.json"))
    return std::filesystem::path(dir) / "pkg";
  WARN_MESSAGE(false, "VGEN_WAN_PARITY_DIR not set (no tooling Python): skipped");
  return {};
}

// An output folder removed when the case ends.
struct TempDir {
  std::filesystem::path path = temp_dir("vgen-engine-");
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

// One worker, one retry and a fixed batch of 1 ("auto" would probe at start-up): the same
// groups on every machine.
inline RuntimeConfig small_config(const std::filesystem::path& model, const std::filesystem::path& out) {
  RuntimeConfig c;
  c.model = model;
  c.output_dir = out;
  c.retry_attempts = 1;
  c.batching.max_batch = 1;
  c.threads_per_device = 1;
  return c;
}

// A 32x32, 5-frame, 2-step job: a few hundred milliseconds on the tiny package.
inline boost::json::object spec(const std::string& prompt, const std::string& name, int seed = 1) {
  return {{"prompt", prompt}, {"name", name}, {"width", 32}, {"height", 32}, {"frames", 5}, {"steps", 2}, {"seed", seed}};
}

inline std::string bytes_of(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace vgen::test::engine
