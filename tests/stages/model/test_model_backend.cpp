#include "stages/model/model_backend.hpp"

#include <doctest/doctest.h>

#include "tests/support/python_reference.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "runtime/errors.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

at::Tensor tensor_of(const nlohmann::json& j) {
  std::vector<float> flat;
  std::vector<int64_t> shape{static_cast<int64_t>(j.size())};
  if (j[0].is_array()) {
    shape.push_back(static_cast<int64_t>(j[0].size()));
    for (auto& row : j) for (auto& v : row) flat.push_back(v.get<float>());
  } else {
    for (auto& v : j) flat.push_back(v.get<float>());
  }
  return at::tensor(flat).reshape(shape);
}

}  // namespace

TEST_CASE("a TorchScript component loads once per device and reproduces eager PyTorch") {
  const auto dir = vgen::test::temp_dir("vgen-test-");
  auto ref = vgen::test::python_reference("tiny_module.py", dir.string());
  if (!ref) {
    WARN_MESSAGE(false, "VGEN_PYTHON not set: skipped");
    return;
  }
  const fs::path file = (*ref)["module"].get<std::string>();
  auto& cache = ModuleCache::instance();
  cache.clear();
  const auto before = cache.loads();
  std::vector<std::shared_ptr<const Module>> got(8);
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i) ts.emplace_back([&, i] { got[i] = cache.get("torchscript", file, "cpu:0", at::kFloat); });
  for (auto& t : ts) t.join();
  CHECK(cache.loads() - before == 1);  // single flight
  for (auto& m : got) CHECK(m.get() == got[0].get());
  auto replica = cache.get("torchscript", file, "cpu:1", at::kFloat);
  CHECK(replica.get() != got[0].get());  // a second CPU replica has its own copy
  CHECK(cache.loads() - before == 2);

  const auto y = got[0]->forward({tensor_of((*ref)["x"]), tensor_of((*ref)["scale"])});
  const auto want = tensor_of((*ref)["y"]);
  CHECK(y.sizes() == want.sizes());
  CHECK((y - want).abs().max().item<float>() <= 1e-6f);
  // Another traced method of the same module, and one it does not have.
  const auto shifted = got[0]->call("shifted", {tensor_of((*ref)["x"]), tensor_of((*ref)["scale"])});
  CHECK((shifted - tensor_of((*ref)["shifted"])).abs().max().item<float>() <= 1e-6f);
  try {
    got[0]->call("forward_compact", {tensor_of((*ref)["x"])});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("forward_compact") != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("missing, corrupt and unknown things are reported by name") {
  const auto dir = vgen::test::temp_dir("vgen-test-");
  CHECK_THROWS_AS(load_module("torchscript", dir / "absent.pt", "cpu", at::kFloat), Error);
  { std::ofstream(dir / "corrupt.pt") << "not a zip archive"; }
  try {
    load_module("torchscript", dir / "corrupt.pt", "cpu", at::kFloat);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("corrupt.pt") != std::string::npos);
  }
  CHECK_THROWS_AS(load_module("onnx", dir / "x.pt", "cpu", at::kFloat), Error);
  CHECK_THROWS_AS(parse_torch_device("tpu:0"), Error);
  CHECK_THROWS_AS(parse_torch_device("cuda:x"), Error);
  CHECK(parse_torch_device("cuda:1").index() == 1);
  CHECK(parse_torch_device("cpu:3").is_cpu());
  CHECK_THROWS_AS(parse_dtype("float8"), Error);
  CHECK(static_cast<int>(parse_dtype("bfloat16")) == static_cast<int>(at::kBFloat16));
  fs::remove_all(dir);
}

TEST_CASE("a CPU model file larger than the memory left is refused before it is read") {
  const auto dir = vgen::test::temp_dir("vgen-test-");
  { std::ofstream(dir / "transformer.pt") << std::string(4096, 'x'); }  // not TorchScript: never read
  const char* old = std::getenv("VGEN_MEMORY_AVAILABLE");
  const std::string saved = old ? old : "";
  ::setenv("VGEN_MEMORY_AVAILABLE", "999", 1);  // a machine with 999 bytes left
  try {
    ModuleCache::instance().get("torchscript", dir / "transformer.pt", "cpu", at::kFloat);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    const std::string m = e.what();
    CHECK(m.find("transformer.pt") != std::string::npos);
    CHECK(m.find("4 kB") != std::string::npos);     // the file
    CHECK(m.find("999 bytes") != std::string::npos);   // what is left
    CHECK(m.find("corrupt") == std::string::npos);  // refused before torch::jit::load read it
  }
  ::setenv("VGEN_MEMORY_AVAILABLE", "8192", 1);  // enough: now it is read, and found corrupt
  try {
    load_module("torchscript", dir / "transformer.pt", "cpu", at::kFloat);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("corrupt") != std::string::npos);
  }
  if (old) ::setenv("VGEN_MEMORY_AVAILABLE", saved.c_str(), 1);
  else ::unsetenv("VGEN_MEMORY_AVAILABLE");
  fs::remove_all(dir);
}

TEST_CASE("OncePerJobCalls: TorchScript runs unoptimised in its scope, on this thread only, on a CPU and (auto) on CUDA") {
  REQUIRE(torch::jit::getGraphExecutorOptimize());
  REQUIRE_FALSE(model_backend_options().torchscript_gpu_optimize.has_value());
  {
    const OncePerJobCalls once("cpu:0");
    CHECK_FALSE(torch::jit::getGraphExecutorOptimize());
    bool other = false;
    std::thread([&] { other = torch::jit::getGraphExecutorOptimize(); }).join();
    CHECK(other);  // per thread: other compute threads keep optimising their denoiser calls
  }
  CHECK(torch::jit::getGraphExecutorOptimize());
  {
    const OncePerJobCalls once("cuda:0");  // "auto": as on a CPU (only the device's type is read: no GPU needed)
    CHECK_FALSE(torch::jit::getGraphExecutorOptimize());
  }
  CHECK(torch::jit::getGraphExecutorOptimize());
  {
    const TorchScriptOptimizerScope denoiser(c10::Device("cuda:0"), TorchScriptCalls::every_step);
    CHECK(torch::jit::getGraphExecutorOptimize());  // the denoiser keeps the optimiser
  }
}

// Restores the process's options when a case ends, whatever it checked.
struct OptionsSetForCase {
  explicit OptionsSetForCase(const ModelBackendOptions& o) { set_model_backend_options(o); }
  ~OptionsSetForCase() { set_model_backend_options(before); }
  ModelBackendOptions before = model_backend_options();
};

TEST_CASE("torchscript_gpu_optimize false: every TorchScript call on CUDA runs as exported, once-per-job ones too; CPU as before") {
  REQUIRE(torch::jit::getGraphExecutorOptimize());
  const OptionsSetForCase set(ModelBackendOptions{.torchscript_gpu_optimize = false});
  const c10::Device cuda("cuda:0");  // only the device's type is read: no GPU needed
  {
    const TorchScriptOptimizerScope scope(cuda, TorchScriptCalls::every_step);
    CHECK_FALSE(torch::jit::getGraphExecutorOptimize());
    bool other = true;
    std::thread([&] { other = torch::jit::getGraphExecutorOptimize(); }).join();
    CHECK(other);  // LibTorch's setting is per thread: a thread's own call opens its own scope
    {
      const TorchScriptOptimizerScope nested(cuda, TorchScriptCalls::every_step);  // a call inside a once-per-job scope
      CHECK_FALSE(torch::jit::getGraphExecutorOptimize());
    }
    CHECK_FALSE(torch::jit::getGraphExecutorOptimize());  // the inner scope restored nothing it did not change
  }
  CHECK(torch::jit::getGraphExecutorOptimize());
  {
    const OncePerJobCalls once("cuda:0");
    CHECK_FALSE(torch::jit::getGraphExecutorOptimize());
  }
  CHECK(torch::jit::getGraphExecutorOptimize());
  {
    const TorchScriptOptimizerScope scope(c10::Device("cpu"), TorchScriptCalls::every_step);  // a CPU denoiser: optimised
    CHECK(torch::jit::getGraphExecutorOptimize());
  }
  {
    const OncePerJobCalls once("cpu:1");
    CHECK_FALSE(torch::jit::getGraphExecutorOptimize());
  }
  CHECK(torch::jit::getGraphExecutorOptimize());
}

TEST_CASE("torchscript_gpu_optimize true, or fusion on: once-per-job calls on CUDA are optimised too; a CPU's are not") {
  REQUIRE(torch::jit::getGraphExecutorOptimize());
  for (const auto& o : {ModelBackendOptions{.torchscript_gpu_optimize = true}, ModelBackendOptions{.torchscript_gpu_fusion = true}}) {
    const OptionsSetForCase set(o);
    {
      const OncePerJobCalls once("cuda:0");
      CHECK(torch::jit::getGraphExecutorOptimize());
    }
    {
      const OncePerJobCalls once("cpu:0");
      CHECK_FALSE(torch::jit::getGraphExecutorOptimize());
    }
    CHECK(torch::jit::getGraphExecutorOptimize());
  }
}

TEST_CASE("TorchScriptOptimizerScope only turns the optimiser off: a thread that runs with it off (a bench) stays so") {
  const OptionsSetForCase set(ModelBackendOptions{.torchscript_gpu_optimize = true});
  torch::jit::setGraphExecutorOptimize(false);
  {
    const TorchScriptOptimizerScope scope(c10::Device("cuda:0"), TorchScriptCalls::every_step);
    CHECK_FALSE(torch::jit::getGraphExecutorOptimize());
    const OncePerJobCalls once("cpu:0");
    CHECK_FALSE(torch::jit::getGraphExecutorOptimize());
  }
  CHECK_FALSE(torch::jit::getGraphExecutorOptimize());
  torch::jit::setGraphExecutorOptimize(true);
}
