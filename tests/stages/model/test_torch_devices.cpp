#include "stages/model/torch_devices.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

using namespace vgen;

namespace {

// Sets (or unsets) OMP_NUM_THREADS for one case and restores the old value.
struct OmpEnv {
  std::optional<std::string> old;
  explicit OmpEnv(const char* value) {
    if (const char* v = std::getenv("OMP_NUM_THREADS")) old = v;
    if (value) ::setenv("OMP_NUM_THREADS", value, 1);
    else ::unsetenv("OMP_NUM_THREADS");
  }
  ~OmpEnv() {
    if (old) ::setenv("OMP_NUM_THREADS", old->c_str(), 1);
    else ::unsetenv("OMP_NUM_THREADS");
  }
};

int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace

TEST_CASE("threads.intra_op = 0 honours OMP_NUM_THREADS, else shares the cores out") {
  {
    OmpEnv env(nullptr);
    CHECK(default_intra_op_threads(1) == cores());
    CHECK(default_intra_op_threads(static_cast<std::size_t>(cores()) * 4) == 1);  // never 0
    CHECK(default_intra_op_threads(0) == cores());
  }
  {
    OmpEnv env("1");
    CHECK(default_intra_op_threads(1) == 1);
  }
  {
    OmpEnv env("3");
    CHECK(default_intra_op_threads(2) == 3);  // the user's number, not divided
  }
  for (const char* bad : {"", "0", "-2", "two", "4x"}) {
    CAPTURE(bad);
    OmpEnv env(bad);
    CHECK(default_intra_op_threads(1) == cores());
  }
}

TEST_CASE("discovered CUDA devices are numbered from 0 (none on a CPU-only machine); the LibTorch version is known") {
  const auto found = discover_cuda_devices();
  for (std::size_t i = 0; i < found.size(); ++i) CHECK(found[i].index == static_cast<int>(i));
  CHECK_FALSE(torch_version().empty());
}
