#include "stages/model/mapped_weights.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "stages/model/model_backend.hpp"
#include "stages/model/safetensors.hpp"
#include "tests/support/temp_dir.hpp"

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; doctest's is meant.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

std::string bytes_of(const at::Tensor& t) {
  const auto c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// A module y = x @ w + b (+ a float buffer `scale` in a submodule), its weights written to
// `weights_name` beside it and emptied in the TorchScript file, as tools/vgen_export splits a
// large component. Returns the reference output for `x`.
at::Tensor write_split_module(const fs::path& dir, const std::string& weights_name, const at::Tensor& x,
                              std::vector<SafetensorsEntry> entries = {}) {
  torch::jit::Module inner("Inner");
  inner.register_buffer("scale", at::full({1}, 2.0f));
  inner.define("def forward(self, y):\n  return y * self.scale\n");
  torch::jit::Module m("Split");
  m.register_parameter("w", at::arange(6, at::kFloat).reshape({2, 3}) / 7.0, false);
  m.register_parameter("b", at::arange(3, at::kFloat) - 1.0, false);
  m.register_module("inner", inner);
  m.define("def forward(self, x):\n  return self.inner.forward(x.matmul(self.w) + self.b)\n");
  const auto ref = m.forward({x}).toTensor();
  if (entries.empty())
    entries = {{"w", "F32", {2, 3}, bytes_of(m.attr("w").toTensor())},
               {"b", "F32", {3}, bytes_of(m.attr("b").toTensor())},
               {"inner.scale", "F32", {1}, bytes_of(inner.attr("scale").toTensor())}};
  write_safetensors(dir / weights_name, entries);
  m.setattr("w", at::empty({0}));
  m.setattr("b", at::empty({0}));
  inner.setattr("scale", at::empty({0}));
  torch::jit::ExtraFilesMap extra{{kWeightsExtraFile, "{\"file\": \"" + weights_name + "\", \"sha256\": \"x\"}"}};
  m.save((dir / "split.pt").string(), extra);
  return ref;
}

bool mapped_in_this_process(const fs::path& file) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream all;
  all << maps.rdbuf();
  return all.str().find(fs::canonical(file).string()) != std::string::npos;
}

std::string load_error(const fs::path& pt) {
  try {
    load_module("torchscript", pt, "cpu", c10::kFloat);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a split component's weights are mapped from the file beside it, without a copy") {
  test::TempDir dir;
  const auto xin = at::ones({4, 2});
  const auto ref = write_split_module(dir.path(), "split.safetensors", xin);
  {
    auto m = load_module("torchscript", dir / "split.pt", "cpu", c10::kFloat);
    CHECK(at::equal(m->call("forward", {xin}), ref));
    CHECK(mapped_in_this_process(dir / "split.safetensors"));
    const auto params = m->parameters();
    REQUIRE(params.count("w"));
    CHECK(params.at("w").sizes() == at::IntArrayRef({2, 3}));
    // The mapping is private: a write to a mapped weight stays in this process.
    const auto before = SafetensorsFile::open(dir / "split.safetensors");
    at::NoGradGuard no_grad;
    at::Tensor w = params.at("w");
    w.fill_(0.0f);
    CHECK(before.read(*before.find("w")) == bytes_of(at::arange(6, at::kFloat).reshape({2, 3}) / 7.0));
  }
  // The last tensor over the mapping is gone with the module: the file is unmapped.
  CHECK_FALSE(mapped_in_this_process(dir / "split.safetensors"));
}

TEST_CASE("the weights come from the file: other bytes there give another output") {
  test::TempDir dir;
  const auto xin = at::ones({1, 2});
  const auto w = at::full({2, 3}, 1.0f), b = at::zeros({3}), s = at::full({1}, 3.0f);
  write_split_module(dir.path(), "w.safetensors", xin,
                     {{"w", "F32", {2, 3}, bytes_of(w)}, {"b", "F32", {3}, bytes_of(b)},
                      {"inner.scale", "F32", {1}, bytes_of(s)}});
  auto m = load_module("torchscript", dir / "split.pt", "cpu", c10::kFloat);
  CHECK(at::equal(m->call("forward", {xin}), at::full({1, 3}, 6.0f)));  // (1+1) * 3
}

TEST_CASE("a split component whose weights file is missing or does not match fails naming it") {
  test::TempDir dir;
  const auto xin = at::ones({1, 2});
  SUBCASE("missing") {
    write_split_module(dir.path(), "gone.safetensors", xin);
    fs::remove(dir / "gone.safetensors");
    const auto msg = load_error(dir / "split.pt");
    CHECK(msg.find("gone.safetensors") != std::string::npos);
    CHECK(msg.find("does not exist") != std::string::npos);
  }
  SUBCASE("a tensor of the module is absent") {
    write_split_module(dir.path(), "w.safetensors", xin,
                       {{"w", "F32", {2, 3}, std::string(24, '\0')}, {"b", "F32", {3}, std::string(12, '\0')}});
    CHECK(load_error(dir / "split.pt").find("no tensor 'inner.scale'") != std::string::npos);
  }
  SUBCASE("another dtype") {
    write_split_module(dir.path(), "w.safetensors", xin,
                       {{"w", "F16", {2, 3}, std::string(12, '\0')}, {"b", "F32", {3}, std::string(12, '\0')},
                        {"inner.scale", "F32", {1}, std::string(4, '\0')}});
    CHECK(load_error(dir / "split.pt").find("tensor 'w' is F16 but the module expects F32") != std::string::npos);
  }
  SUBCASE("a tensor the module does not have") {
    write_split_module(dir.path(), "w.safetensors", xin,
                       {{"w", "F32", {2, 3}, std::string(24, '\0')}, {"b", "F32", {3}, std::string(12, '\0')},
                        {"inner.scale", "F32", {1}, std::string(4, '\0')}, {"extra", "F32", {1}, std::string(4, '\0')}});
    CHECK(load_error(dir / "split.pt").find("tensor 'extra' is not a parameter") != std::string::npos);
  }
}

TEST_CASE("the weights file must be a plain name beside the TorchScript file") {
  CHECK(weights_file_for("/p/t.pt", "") == fs::path());
  CHECK(weights_file_for("/p/t.pt", R"({"file": "t.safetensors"})") == fs::path("/p/t.safetensors"));
  for (const std::string bad : {R"({"file": "../t.safetensors"})", R"({"file": "/etc/passwd"})", R"({"file": ".."})",
                                R"({"file": ""})", R"({"name": "t"})", "not json"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(weights_file_for("/p/t.pt", bad), Error);
  }
}

TEST_CASE("a split component whose weights do not fit in memory is refused before mapping") {
  test::TempDir dir;
  torch::jit::Module m("Big");
  m.register_parameter("w", at::ones({256, 1024}), false);  // 1 MiB
  m.define("def forward(self, x):\n  return x.matmul(self.w)\n");
  write_safetensors(dir / "big.safetensors", {{"w", "F32", {256, 1024}, bytes_of(m.attr("w").toTensor())}});
  m.setattr("w", at::empty({0}));
  m.save((dir / "split.pt").string(), {{kWeightsExtraFile, R"({"file": "big.safetensors"})"}});
  REQUIRE(fs::file_size(dir / "split.pt") < (512u << 10));
  ::setenv("VGEN_MEMORY_AVAILABLE", std::to_string(512u << 10).c_str(), 1);
  std::string msg;
  try {
    load_module("torchscript", dir / "split.pt", "cpu", c10::kFloat);
  } catch (const Error& e) {
    msg = e.what();
  }
  ::unsetenv("VGEN_MEMORY_AVAILABLE");
  CHECK(msg.find("model weights '") != std::string::npos);
  CHECK(msg.find("big.safetensors") != std::string::npos);
}
