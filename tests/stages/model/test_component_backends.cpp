#include "stages/model/component_backends.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "stages/model/aoti_library_cache.hpp"
#include "stages/model/aoti_package.hpp"
#include "stages/model/model_backend.hpp"
#include "tests/support/python_reference.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <thread>

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

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// tools/reference/tiny_aoti.py, once per test binary (it compiles with Inductor: ~1 min).
const nlohmann::json* reference() {
  static std::optional<nlohmann::json> ref;
  static bool tried = false;
  if (!tried) {
    tried = true;
    ref = vgen::test::python_reference("tiny_aoti.py", vgen::test::temp_dir("vgen-aoti-").string());
  }
  if (!ref) WARN_MESSAGE(false, "VGEN_PYTHON not set: skipped");
  return ref ? &*ref : nullptr;
}

CompiledComponent compiled(const fs::path& file) {
  return {.backend = "aoti", .file = file, .sha256 = sha256_file(file), .bytes = fs::file_size(file), .torch = "2.11.0"};
}

// A package in memory whose component `name` is a copy of tiny.pt (its own file per case, so that
// each case's choice is its own in the process-wide cache) with `pt2` as its CPU compiled file.
ModelPackage package_with(const fs::path& dir, const std::string& name, const std::string& torchscript, const fs::path& pt2) {
  ModelPackage p;
  p.dir = dir;
  ModelComponent c{.file = dir / torchscript, .sha256 = sha256_file(dir / torchscript), .bytes = fs::file_size(dir / torchscript),
                   .format = "torchscript", .dtype = "float32", .compiled = {}};
  if (!pt2.empty()) c.compiled.emplace("cpu", compiled(pt2));
  p.components.emplace(name, c);
  return p;
}

}  // namespace

TEST_CASE("an AOTInductor package for the CPU runs every method as eager PyTorch and the TorchScript twin do" * doctest::timeout(600)) {
  const auto* ref = reference();
  if (!ref) return;
  const fs::path dir = (*ref)["dir"].get<std::string>();
  const auto x = tensor_of((*ref)["x"]), scale = tensor_of((*ref)["scale"]);
  CHECK(aoti_refusal(compiled(dir / "tiny.cpu.pt2"), "cpu").empty());
  auto& cache = ModuleCache::instance();
  const auto before = cache.loads();
  std::vector<std::shared_ptr<const Module>> got(4);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) ts.emplace_back([&, i] { got[i] = cache.get("aoti", dir / "tiny.cpu.pt2", "cpu:0", at::kFloat); });
  for (auto& t : ts) t.join();
  CHECK(cache.loads() - before == 1);  // loaded once, shared
  const auto aoti = got[0];
  const auto script = load_module("torchscript", dir / "tiny.pt", "cpu", at::kFloat);
  CHECK(aoti_loaded_methods(*aoti).empty());  // each method's library loads on its first call
  CHECK(max_diff(aoti->forward({x, scale}), tensor_of((*ref)["y"])) <= 1e-5);
  CHECK(aoti_loaded_methods(*aoti) == std::vector<std::string>{"forward"});
  CHECK(max_diff(aoti->call("shifted", {x, scale}), tensor_of((*ref)["shifted"])) <= 1e-5);
  CHECK(aoti_loaded_methods(*aoti) == std::vector<std::string>{"forward", "shifted"});
  CHECK(max_diff(aoti->forward({x, scale}), script->forward({x, scale})) <= 1e-5);
  // batch rows are dynamic: one row and five rows run on the same library
  for (int rows : {1, 5}) {
    const auto xs = at::randn({rows, 4});
    CHECK(max_diff(aoti->forward({xs, scale}), script->forward({xs, scale})) <= 1e-5);
  }
  CHECK_THROWS_AS(aoti->call("nope", {x, scale}), Error);
  // concurrent calls share the one model container
  std::vector<double> diffs(4);
  std::vector<std::thread> calls;
  for (int i = 0; i < 4; ++i) calls.emplace_back([&, i] { diffs[i] = max_diff(aoti->forward({x, scale}), tensor_of((*ref)["y"])); });
  for (auto& t : calls) t.join();
  for (double d : diffs) CHECK(d <= 1e-5);
}

TEST_CASE("a .pt2 for another device, another torch version, or a damaged one is refused by name; TorchScript serves" * doctest::timeout(600)) {
  const auto* ref = reference();
  if (!ref) return;
  const fs::path dir = (*ref)["dir"].get<std::string>();
  const auto x = tensor_of((*ref)["x"]), scale = tensor_of((*ref)["scale"]);
  const struct {
    const char* file;
    const char* says;
  } refused[] = {{"tiny.cuda.pt2", "compiled for device type 'cuda', not 'cpu'"},
                 {"tiny.old.pt2", "compiled with torch 2.9.1, this vgen runs LibTorch 2.11"},
                 {"tiny.bad.pt2", "not a readable AOTInductor package"}};
  for (const auto& r : refused) {
    CAPTURE(r.file);
    const auto why = aoti_refusal(compiled(dir / r.file), "cpu");
    CHECK(why.find(r.says) != std::string::npos);
    CHECK(why.find(r.file) != std::string::npos);
    CHECK_THROWS_AS(load_module("aoti", dir / r.file, "cpu", at::kFloat), Error);
  }
  // the manifest's sha256 or size differ from the file's: refused before it is opened
  auto changed = compiled(dir / "tiny.cpu.pt2");
  changed.sha256[0] = changed.sha256[0] == '0' ? '1' : '0';
  CHECK(aoti_refusal(changed, "cpu").find("sha256 mismatch") != std::string::npos);
  changed = compiled(dir / "tiny.cpu.pt2");
  changed.bytes += 1;
  CHECK(aoti_refusal(changed, "cpu").find("truncated or replaced") != std::string::npos);
  CHECK(aoti_refusal(compiled(dir / "tiny.cpu.pt2"), "cuda").find("not 'cuda'") != std::string::npos);

  // Through a package: each refused file falls back to the component's TorchScript file, with
  // the reason recorded (and logged once); the good one serves as "aoti".
  clear_component_backends();
  auto& cache = ModuleCache::instance();
  int n = 0;
  for (const char* pt2 : {"tiny.cpu.pt2", "tiny.cuda.pt2", "tiny.old.pt2", "tiny.bad.pt2"}) {
    CAPTURE(pt2);
    const auto name = "m" + std::to_string(n++);
    const auto own = "tiny." + name + ".pt";
    fs::copy_file(dir / "tiny.pt", dir / own, fs::copy_options::overwrite_existing);
    const auto p = package_with(dir, name, own, dir / pt2);
    const auto m = cache.get_component(p, name, "cpu:0");
    CHECK(max_diff(m->forward({x, scale}), tensor_of((*ref)["y"])) <= 1e-5);
    CHECK(m.get() == cache.get_component(p, name, "cpu:0").get());  // chosen and loaded once
    const auto plan = plan_component_backend(p, name, "cpu:0");
    CHECK(plan.backend == (std::string(pt2) == "tiny.cpu.pt2" ? "aoti" : "torchscript"));
    CHECK(plan.refused.empty() == (std::string(pt2) == "tiny.cpu.pt2"));
    // "torchscript" never takes the compiled file
    CHECK(plan_component_backend(p, name, "cpu:0", "torchscript").backend == "torchscript");
    // nothing for CUDA: the TorchScript file, no refusal
    CHECK(plan_component_backend(p, name, "cuda:0").backend == "torchscript");
    CHECK(plan_component_backend(p, name, "cuda:0").refused.empty());
  }
  const auto served = component_backends();
  REQUIRE(served.size() == 4);
  int aoti = 0;
  for (const auto& s : served) {
    aoti += s.backend == "aoti";
    CHECK((s.backend == "aoti") == s.refused.empty());
  }
  CHECK(aoti == 1);

  // A component that is only a .pt2 has nothing to fall back to: the refusal is its error.
  ModelPackage only;
  only.dir = dir;
  only.components.emplace("m", ModelComponent{.file = dir / "tiny.cuda.pt2", .sha256 = sha256_file(dir / "tiny.cuda.pt2"),
                                              .bytes = fs::file_size(dir / "tiny.cuda.pt2"), .format = "aoti",
                                              .dtype = "float32", .compiled = {}});
  try {
    cache.get_component(only, "m", "cpu:0");
    FAIL("a refused .pt2 with no TorchScript file loaded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);  // exit 2 from the CLI
    CHECK(std::string(e.what()).find("no TorchScript file to fall back to") != std::string::npos);
  }
}

TEST_CASE("a compiled file serves the methods and shapes it was compiled for; the component's own file the rest" *
          doctest::timeout(600)) {
  const auto* ref = reference();
  if (!ref) return;
  const fs::path dir = (*ref)["dir"].get<std::string>();
  const auto x = tensor_of((*ref)["x"]), scale = tensor_of((*ref)["scale"]);
  auto& cache = ModuleCache::instance();
  // The .pt2 records its inputs' ranges (rows 1..64, 4 features; scale [1]) and checks them:
  // the compiled code itself would run on any shape.
  const auto aoti = cache.get("aoti", dir / "tiny.cpu.pt2", "cpu:0", at::kFloat);
  const auto many = at::randn({65, 4});
  CHECK(aoti->serves("forward", {x, scale}));
  CHECK_FALSE(aoti->serves("forward", {many, scale}));
  CHECK_FALSE(aoti->serves("forward", {at::randn({3, 5}), scale}));
  CHECK_FALSE(aoti->serves("nope", {x, scale}));
  try {
    aoti->forward({many, scale});
    FAIL("a compiled model ran on 65 rows, compiled for 1..64");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("input 0 dim 0 is 65, compiled for 1..64") != std::string::npos);
  }
  const auto only_forward = cache.get("aoti", dir / "tiny.forward_only.pt2", "cpu:0", at::kFloat);
  CHECK(only_forward->has_method("forward"));
  CHECK_FALSE(only_forward->has_method("shifted"));

  // Through a package: the component's TorchScript file is loaded on the first call the .pt2
  // cannot serve, once, and serves it.
  clear_component_backends();
  fs::copy_file(dir / "tiny.pt", dir / "tiny.partial.pt", fs::copy_options::overwrite_existing);
  const auto p = package_with(dir, "partial", "tiny.partial.pt", dir / "tiny.forward_only.pt2");
  const auto m = cache.get_component(p, "partial", "cpu:0");
  CHECK(component_backends().at(0).backend == "aoti");
  const auto script = load_module("torchscript", dir / "tiny.pt", "cpu", at::kFloat);
  const auto loads = cache.loads();
  CHECK(max_diff(m->forward({x, scale}), tensor_of((*ref)["y"])) <= 1e-5);
  CHECK(cache.loads() == loads);  // the .pt2 served
  CHECK(m->has_method("shifted"));
  CHECK(cache.loads() == loads + 1);  // the TorchScript file, loaded to answer
  CHECK(max_diff(m->call("shifted", {x, scale}), tensor_of((*ref)["shifted"])) <= 1e-5);
  CHECK(max_diff(m->forward({many, scale}), script->forward({many, scale})) <= 1e-5);  // 65 rows: TorchScript
  CHECK(cache.loads() == loads + 1);
  CHECK(m.get() == cache.get_component(p, "partial", "cpu:0").get());
  CHECK_THROWS_AS(m->call("nope", {x, scale}), Error);
}

TEST_CASE("a compiled method whose library does not load is found on its first call: its own file serves it, and the "
          "fallback is recorded and logged" * doctest::timeout(600)) {
  const auto* ref = reference();
  if (!ref) return;
  const fs::path dir = (*ref)["dir"].get<std::string>();
  const auto x = tensor_of((*ref)["x"]), scale = tensor_of((*ref)["scale"]);
  auto& cache = ModuleCache::instance();
  // Alone: its metadata reads, forward loads and runs, shifted says why it cannot.
  const auto aoti = cache.get("aoti", dir / "tiny.noload.pt2", "cpu:0", at::kFloat);
  CHECK(max_diff(aoti->forward({x, scale}), tensor_of((*ref)["y"])) <= 1e-5);
  CHECK_FALSE(aoti->serves("shifted", {x, scale}));
  CHECK(aoti->unloadable("shifted").find("(method 'shifted') does not load") != std::string::npos);
  CHECK(aoti->unloadable("forward").empty());
  try {
    aoti->call("shifted", {x, scale});
    FAIL("a method whose library does not load ran");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);  // exit 2 / 4xx, as a refused .pt2
    CHECK(std::string(e.what()).find("tiny.noload.pt2") != std::string::npos);
  }
  // Through a package: recorded as aoti until the failing method is called, then as the
  // component's TorchScript file with the reason.
  clear_component_backends();
  fs::copy_file(dir / "tiny.pt", dir / "tiny.noload.pt", fs::copy_options::overwrite_existing);
  const auto p = package_with(dir, "noload", "tiny.noload.pt", dir / "tiny.noload.pt2");
  const auto m = cache.get_component(p, "noload", "cpu:0");
  REQUIRE(component_backends().size() == 1);
  CHECK(component_backends().at(0).backend == "aoti");
  CHECK(max_diff(m->forward({x, scale}), tensor_of((*ref)["y"])) <= 1e-5);
  CHECK(max_diff(m->call("shifted", {x, scale}), tensor_of((*ref)["shifted"])) <= 1e-5);
  const auto after = component_backends();
  REQUIRE(after.size() == 1);
  CHECK(after.at(0).backend == "torchscript");
  CHECK(after.at(0).file == dir / "tiny.noload.pt");
  CHECK(after.at(0).refused.find("does not load") != std::string::npos);
  CHECK(max_diff(m->call("shifted", {x, scale}), tensor_of((*ref)["shifted"])) <= 1e-5);  // and again
}

TEST_CASE("compiled input ranges parse") {
  const auto r = parse_aoti_input_ranges("0:1:64,2:3:64;;1:4:4");
  REQUIRE(r.size() == 3);
  REQUIRE(r[0].size() == 2);
  CHECK((r[0][1].dim == 2 && r[0][1].min == 3 && r[0][1].max == 64));
  CHECK(r[1].empty());
  CHECK((r[2].size() == 1 && r[2][0].max == 4));
  CHECK(parse_aoti_input_ranges("").size() == 1);
  CHECK_THROWS_AS(parse_aoti_input_ranges("0:1"), Error);
  CHECK_THROWS_AS(parse_aoti_input_ranges("0:x:2"), Error);
}

TEST_CASE("torch versions compare by release") {
  CHECK(torch_release("2.11.0+cu130") == "2.11.0");
  CHECK(torch_release("2.11.0") == "2.11.0");
  CHECK(device_type_of("cpu:1") == "cpu");
  CHECK(device_type_of("cuda:0") == "cuda");
  CHECK(device_type_of("cpu") == "cpu");
}

TEST_CASE("a compiled method loads from the machine's unpacked copy, unpacked once; with the copy off, torch's loader serves" *
          doctest::timeout(600)) {
  const auto* ref = reference();
  if (!ref) return;
  const fs::path dir = (*ref)["dir"].get<std::string>();
  const auto x = tensor_of((*ref)["x"]), scale = tensor_of((*ref)["scale"]);
  auto& unpacked = AotiLibraryCache::process();
  const auto kept = unpacked.root();
  const auto root = vgen::test::temp_dir("vgen-aoti-unpacked-");
  unpacked.set_root(root);
  auto& cache = ModuleCache::instance();
  auto entries = [&] {  // the models unpacked under the root (one folder per .pt2, an entry per model)
    std::vector<std::string> out;
    for (const auto& folder : fs::directory_iterator(root))
      for (const auto& e : fs::directory_iterator(folder.path()))
        if (e.is_directory() && e.path().filename().string().rfind(".tmp-", 0) != 0) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  };
  // A copy of its own: the process-wide module cache would serve an earlier case's module.
  fs::copy_file(dir / "tiny.cpu.pt2", dir / "tiny.unpacked.pt2", fs::copy_options::overwrite_existing);
  const auto first = cache.get("aoti", dir / "tiny.unpacked.pt2", "cpu:0", at::kFloat);
  CHECK(entries().empty());  // nothing unpacked before a method is called
  CHECK(max_diff(first->forward({x, scale}), tensor_of((*ref)["y"])) <= 1e-5);
  const auto made = entries();
  REQUIRE(made.size() == 1);
  CHECK(made[0].find("forward-model") != std::string::npos);
  // Another device's module of the same file reuses the entry and computes the same.
  const auto second = cache.get("aoti", dir / "tiny.unpacked.pt2", "cpu:1", at::kFloat);
  CHECK(max_diff(second->forward({x, scale}), tensor_of((*ref)["y"])) <= 1e-5);
  CHECK(entries() == made);
  CHECK(max_diff(second->call("shifted", {x, scale}), tensor_of((*ref)["shifted"])) <= 1e-5);
  CHECK(entries().size() == 2);
  // Off: torch's own loader (a temporary folder) serves, with the same results.
  unpacked.set_root({});
  const auto off = cache.get("aoti", dir / "tiny.unpacked.pt2", "cpu:2", at::kFloat);
  CHECK(max_diff(off->call("shifted", {x, scale}), tensor_of((*ref)["shifted"])) <= 1e-5);
  CHECK(entries().size() == 2);
  unpacked.set_root(kept);
  fs::remove_all(root);
}
