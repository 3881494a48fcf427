#include "stages/model/lora.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include "runtime/errors.hpp"
#include "runtime/executor.hpp"
#include "runtime/pipeline.hpp"
#include "stages/families/family.hpp"
#include "stages/model/model_package.hpp"
#include "stages/exec/model_set.hpp"
#include "tests/support/python_reference.hpp"
#include "tests/support/temp_dir.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <boost/json/serialize.hpp>

#include <atomic>
#include <fstream>
#include <mutex>

#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

std::string bytes_of(const at::Tensor& t) {
  auto c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.numel() * c.element_size()));
}

const ParameterShapes kShapes = {{"transformer.blocks.0.attn1.to_q.weight", {8, 8}},
                                 {"transformer.blocks.0.attn1.to_q.bias", {8}},
                                 {"transformer.blocks.0.ffn.net.0.proj.weight", {16, 8}},
                                 {"transformer.blocks.0.scale_shift_table", {1, 6, 8}}};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
  return "no error";
}

// The tiny package and lora_parity.py's LoRAs and diffusers frames (once per binary).
const nlohmann::json* reference() {
  static std::optional<nlohmann::json> ref;
  static bool tried = false;
  if (tried) return ref ? &*ref : nullptr;
  tried = true;
  const char* dir = std::getenv("VGEN_WAN_PARITY_DIR");
  if (!dir || !*dir || !fs::is_regular_file(fs::path(dir) / "parity.json")) return nullptr;
  const auto out = fs::path(dir) / "lora";
  ref = test::python_reference("lora_parity.py", std::string(dir) + " " + out.string() + " 2>/dev/null");
  return ref ? &*ref : nullptr;
}

struct Run {
  std::vector<std::shared_ptr<Job>> jobs;
  std::map<std::size_t, std::uint64_t> groups;
};

// Runs `specs` through the real stages on one CPU device, up to `max_batch` per denoise call.
Run run_jobs(const fs::path& package, const fs::path& lora_dir, const std::vector<boost::json::object>& specs,
             const fs::path& out, std::size_t max_batch = 1, std::map<std::string, at::Tensor>* frames = nullptr,
             const std::string& backend = "torchscript") {
  const auto devs = parse_device_list("cpu");
  Executor executor({.io_threads = 1});
  add_device_pools(executor, devs);
  DevicePool pool(devs);
  ModelSetOptions o;
  o.out_dir = out;
  o.lora.dir = lora_dir;
  o.backend = backend;
  o.batching.max_batch = max_batch;
  o.batching.wait = std::chrono::seconds(20);
  auto set = std::make_shared<ModelSet>(std::vector<std::pair<std::string, fs::path>>{{"m", package}}, executor, pool, o);
  auto stages = set->stages();
  for (auto& s : stages)
    if (s.name == "decode" && frames) {
      auto inner = s.fn;
      s.fn = [inner, frames](Job& job) -> boost::asio::awaitable<void> {
        co_await inner(job);
        (*frames)[job.id()] = family_job(job)->frames.clone();
      };
    }
  Pipeline pipeline(executor.get_executor(), stages);
  pipeline.start();
  auto submit_all = [&]() -> boost::asio::awaitable<std::vector<std::shared_ptr<Job>>> {
    std::vector<std::shared_ptr<Job>> jobs;
    for (const auto& j : specs) jobs.push_back(co_await pipeline.submit(boost::json::value(j)));
    co_await pipeline.drain();
    co_return jobs;
  };
  Run r;
  r.jobs = executor.run_sync(submit_all());
  executor.stop();
  r.groups = set->group_sizes("denoise");
  return r;
}

boost::json::object job(const nlohmann::json& ref, const nlohmann::json& loras, double guidance, int steps) {
  const auto& c = ref["case"];
  boost::json::object o{{"prompt", c["prompt"].get<std::string>()}, {"negative_prompt", c["negative_prompt"].get<std::string>()},
                        {"height", c["height"].get<int>()}, {"width", c["width"].get<int>()},
                        {"frames", c["num_frames"].get<int>()}, {"steps", steps}, {"guidance", guidance},
                        {"seed", ref["seed"].get<std::uint64_t>()}};
  boost::json::array a;
  for (const auto& l : loras) a.push_back(boost::json::object{{"name", l[0].get<std::string>()}, {"scale", l[1].get<double>()}});
  if (!a.empty()) o["loras"] = std::move(a);
  return o;
}

// The "counting" model backend: TorchScript modules whose transformer.pt counts the rows (batch
// size) of every call's first input, merged LoRA variants included.
std::atomic<long> g_transformer_rows{0}, g_transformer_calls{0};

class CountingModule final : public Module {
 public:
  CountingModule(std::shared_ptr<const Module> inner, bool count) : inner_(std::move(inner)), count_(count) {}
  at::Tensor call(std::string_view method, const std::vector<at::Tensor>& inputs) const override {
    if (count_ && !inputs.empty()) {
      g_transformer_rows += inputs[0].size(0);
      ++g_transformer_calls;
    }
    return inner_->call(method, inputs);
  }
  c10::Device device() const override { return inner_->device(); }
  c10::ScalarType dtype() const override { return inner_->dtype(); }
  std::map<std::string, at::Tensor> parameters() const override { return inner_->parameters(); }
  std::shared_ptr<const Module> with_parameters(const std::map<std::string, at::Tensor>& replaced) const override {
    return std::make_shared<CountingModule>(inner_->with_parameters(replaced), count_);
  }

 private:
  std::shared_ptr<const Module> inner_;
  bool count_;
};

void register_counting_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_model_backend("counting", [](const fs::path& file, c10::Device device, c10::ScalarType dtype) {
      return std::make_shared<CountingModule>(load_module("torchscript", file, device.str(), dtype),
                                              file.filename() == "transformer.pt");
    });
  });
}

// The tiny package of the wan_parity fixture, or empty without it.
fs::path parity_package() {
  const char* dir = std::getenv("VGEN_WAN_PARITY_DIR");
  if (!dir || !*dir || !fs::is_regular_file(fs::path(dir) / "parity.json")) return {};
  std::ifstream in(fs::path(dir) / "parity.json");
  return nlohmann::json::parse(in)["package"].get<std::string>();
}

// A rank-2 LoRA on blocks.0.attn1.to_q of `package`'s transformer with `metadata` in its header.
void write_suggesting_lora(const fs::path& file, const fs::path& package, const std::map<std::string, std::string>& metadata) {
  const auto pkg = load_model_package(package);
  const auto& c = pkg.component("transformer");
  const auto shapes = parameter_shapes(*load_module("torchscript", c.file, "cpu", parse_dtype(c.dtype)));
  const auto& w = shapes.at("transformer.blocks.0.attn1.to_q.weight");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  write_safetensors(file,
                    {{"transformer.blocks.0.attn1.to_q.lora_A.weight", "F32", {2, w[1]}, bytes_of(at::randn({2, w[1]}, gen) * 0.1)},
                     {"transformer.blocks.0.attn1.to_q.lora_B.weight", "F32", {w[0], 2}, bytes_of(at::randn({w[0], 2}, gen) * 0.1)}},
                    metadata);
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>(); }

}  // namespace

TEST_CASE("both layouts map onto the exported transformer's names; alpha from the header, a key or the rank") {
  test::TempDir dir;
  auto t = [](std::vector<std::int64_t> s) { return bytes_of(at::ones(s)); };
  write_safetensors(dir / "peft.safetensors",
                    {{"transformer.blocks.0.attn1.to_q.lora_A.weight", "F32", {4, 8}, t({4, 8})},
                     {"transformer.blocks.0.attn1.to_q.lora_B.weight", "F32", {8, 4}, t({8, 4})}},
                    {{"lora_adapter_metadata", R"({"transformer.lora_alpha": 8, "transformer.r": 4})"}});
  auto peft = LoraFile::open(dir / "peft.safetensors").get()->map_onto(kShapes);
  REQUIRE(peft.size() == 1);
  CHECK(peft[0].parameter == "transformer.blocks.0.attn1.to_q.weight");
  CHECK(peft[0].alpha_over_rank == 2.0);
  write_safetensors(dir / "comfy.safetensors",
                    {{"diffusion_model.blocks.0.self_attn.q.lora_down.weight", "F32", {4, 8}, t({4, 8})},
                     {"diffusion_model.blocks.0.self_attn.q.lora_up.weight", "F32", {8, 4}, t({8, 4})},
                     {"diffusion_model.blocks.0.self_attn.q.alpha", "F32", {}, t({})},
                     {"diffusion_model.blocks.0.self_attn.q.diff_b", "F32", {8}, t({8})},
                     {"diffusion_model.blocks.0.ffn.0.diff", "F32", {16, 8}, t({16, 8})},
                     {"diffusion_model.blocks.0.modulation.diff", "F32", {1, 6, 8}, t({1, 6, 8})}});
  auto comfy = LoraFile::open(dir / "comfy.safetensors")->map_onto(kShapes);
  std::map<std::string, LoraUpdate> by;
  for (const auto& u : comfy) by[u.parameter] = u;
  REQUIRE(by.size() == 4);
  CHECK(by.at("transformer.blocks.0.attn1.to_q.weight").alpha_over_rank == 0.25);
  CHECK(by.at("transformer.blocks.0.attn1.to_q.bias").diff);
  CHECK(by.at("transformer.blocks.0.ffn.net.0.proj.weight").diff);
  CHECK(by.at("transformer.blocks.0.scale_shift_table").diff);
}

TEST_CASE("bad LoRA files are refused naming the file and the first bad key") {
  test::TempDir dir;
  auto t = [](std::vector<std::int64_t> s) { return bytes_of(at::ones(s)); };
  auto open_err = [&](const std::vector<SafetensorsEntry>& e) {
    write_safetensors(dir / "bad.safetensors", e);
    return error_of([&] { LoraFile::open(dir / "bad.safetensors")->map_onto(kShapes); });
  };
  auto e = open_err({{"transformer.blocks.7.attn1.to_q.lora_A.weight", "F32", {4, 8}, t({4, 8})},
                     {"transformer.blocks.7.attn1.to_q.lora_B.weight", "F32", {8, 4}, t({8, 4})}});
  CHECK(e.find("bad.safetensors") != std::string::npos);
  CHECK(e.find("key 'transformer.blocks.7.attn1.to_q.lora_A.weight': matches no layer") != std::string::npos);
  e = open_err({{"transformer.blocks.0.attn1.to_q.lora_A.weight", "F32", {4, 6}, t({4, 6})},
                {"transformer.blocks.0.attn1.to_q.lora_B.weight", "F32", {8, 4}, t({8, 4})}});
  CHECK(e.find("does not fit transformer.blocks.0.attn1.to_q.weight [8, 8]") != std::string::npos);
  e = open_err({{"transformer.blocks.0.attn1.to_q.lora_A.weight", "F32", {4, 8}, t({4, 8})}});
  CHECK(e.find("has no matching lora_up/lora_B weight") != std::string::npos);
  e = open_err({{"unet.down.0.weight", "F32", {4}, t({4})}});
  CHECK(e.find("key 'unet.down.0.weight': not a LoRA key") != std::string::npos);
  // Truncated: the reader names the file.
  write_safetensors(dir / "cut.safetensors", {{"transformer.blocks.0.attn1.to_q.lora_A.weight", "F32", {4, 8}, t({4, 8})}});
  fs::resize_file(dir / "cut.safetensors", fs::file_size(dir / "cut.safetensors") - 5);
  e = error_of([&] { LoraFile::open(dir / "cut.safetensors"); });
  CHECK(e.find("cut.safetensors") != std::string::npos);
  CHECK(e.find("truncated") != std::string::npos);
}

TEST_CASE("names resolve only inside lora_dir, symlinks included") {
  test::TempDir dir, outside;
  fs::create_directories(dir / "loras");
  std::ofstream(outside / "secret.safetensors") << "x";
  std::ofstream(dir / "loras" / "ok.safetensors") << "x";
  fs::create_symlink(outside / "secret.safetensors", dir / "loras" / "link.safetensors");
  CHECK(resolve_lora_file(dir / "loras", "ok") == fs::canonical(dir / "loras" / "ok.safetensors"));
  CHECK(resolve_lora_file(dir / "loras", "ok.safetensors") == fs::canonical(dir / "loras" / "ok.safetensors"));
  CHECK(error_of([&] { resolve_lora_file(dir / "loras", "link"); }).find("resolves outside lora_dir") != std::string::npos);
  CHECK(error_of([&] { resolve_lora_file(dir / "loras", "nope"); }).find("loras: 'nope': unknown LoRA") == 0);
  CHECK(error_of([&] { resolve_lora_file(dir / "loras", "../secret"); }).find("not a file name") != std::string::npos);
  CHECK(error_of([&] { resolve_lora_file({}, "ok"); }).find("no lora_dir is configured") != std::string::npos);
}

TEST_CASE("LoRA jobs match diffusers' load_lora_weights + set_adapters; base restored; batches never mix sets" *
          doctest::timeout(900)) {
  const auto* ref = reference();
  if (!ref) {
    WARN_MESSAGE(false, "VGEN_WAN_PARITY_DIR / VGEN_PYTHON not set: skipped");
    return;
  }
  test::TempDir out;
  const fs::path pkg = (*ref)["package"].get<std::string>(), loras = (*ref)["lora_dir"].get<std::string>();
  auto frames_ref = torch::jit::load((*ref)["reference"].get<std::string>());
  std::vector<boost::json::object> specs{job(*ref, nlohmann::json::array(), 5.0, 4)};  // base first: a fresh process's output
  for (const auto& c : (*ref)["cases"]) specs.push_back(job(*ref, c["loras"], c["guidance"].get<double>(), c["steps"].get<int>()));
  specs.push_back(specs.front());  // base again, after every LoRA job
  std::map<std::string, at::Tensor> frames;
  auto run = run_jobs(pkg, loras, specs, out.path(), 1, &frames);
  for (const auto& j : run.jobs) REQUIRE_MESSAGE(j->state() == JobState::done, j->snapshot().error);
  std::size_t i = 1;
  for (const auto& c : (*ref)["cases"]) {
    const auto name = c["name"].get<std::string>();
    const auto want = frames_ref.attr("frames_" + name).toTensor()[0].permute({0, 2, 3, 1});
    const double d = max_diff(frames.at(run.jobs[i++]->id()), want);
    MESSAGE("LoRA case " << name << ": max |vgen - diffusers| over frames = " << d << " (LoRA effect " << c["lora_effect"] << ")");
    CHECK(d <= 1e-3);
    CHECK(c["lora_effect"].get<double>() > 1e-2);  // the LoRA changes the video: the check above can fail
  }
  CHECK(at::equal(frames.at(run.jobs.front()->id()), frames.at(run.jobs.back()->id())));  // bit-identical

  // A batch mixing LoRA A, LoRA B and none: three denoise groups, each job equal to its solo run.
  const auto& cs = (*ref)["cases"];
  std::vector<boost::json::object> mixed{job(*ref, cs[0]["loras"], 5.0, 4), job(*ref, cs[1]["loras"], 5.0, 4),
                                         job(*ref, nlohmann::json::array(), 5.0, 4), job(*ref, cs[0]["loras"], 5.0, 4)};
  mixed[3]["seed"] = 99;  // a second A job (other noise) that may share A's group
  std::map<std::string, at::Tensor> batched;
  auto b = run_jobs(pkg, loras, mixed, out.path(), 4, &batched);
  std::uint64_t groups = 0;
  for (const auto& [size, n] : b.groups) groups += n;
  CHECK(groups == 3);                // A+A, B, none: never one group of four
  CHECK(b.groups.count(2) == 1);     // the two A jobs shared their call
  CHECK(b.groups.count(4) == 0);
  for (std::size_t k = 0; k < mixed.size(); ++k) {
    REQUIRE_MESSAGE(b.jobs[k]->state() == JobState::done, b.jobs[k]->snapshot().error);
    std::map<std::string, at::Tensor> solo;
    auto s = run_jobs(pkg, loras, {mixed[k]}, out.path(), 1, &solo);
    CHECK(max_diff(solo.at(s.jobs[0]->id()), batched.at(b.jobs[k]->id())) <= 1e-4);
  }
}

// Issue 22, few-step sampling: a LoRA's suggested steps / guidance / shift apply to the fields a
// job leaves out, and guidance 1 runs no unconditional rows (counted at the transformer).
TEST_CASE("a few-step LoRA's suggestions apply unless the job sets the field; guidance 1 runs one row per job" *
          doctest::timeout(600)) {
  const auto pkg = parity_package();
  if (pkg.empty()) {
    WARN_MESSAGE(false, "VGEN_WAN_PARITY_DIR not set: skipped");
    return;
  }
  register_counting_backend();
  test::TempDir out, loras;
  write_suggesting_lora(loras.path() / "fast.safetensors", pkg, {{"vgen.steps", "2"}, {"vgen.guidance", "1"}, {"vgen.shift", "7"}});
  const boost::json::object base{{"prompt", "a red circle"}, {"width", 32}, {"height", 32}, {"frames", 5}, {"seed", 1}};
  auto with = [&](boost::json::object extra) {
    auto o = base;
    o["loras"] = boost::json::array{boost::json::object{{"name", "fast"}}};
    for (const auto& kv : extra) o[kv.key()] = kv.value();
    return o;
  };
  struct Case {
    boost::json::object spec;
    int steps;
    double guidance, shift;
    long rows_per_step;
  };
  const std::vector<Case> cases{
      {with({}), 2, 1.0, 7.0, 1},                                     // all three suggested: no uncond row
      {with({{"guidance", 5.0}}), 2, 5.0, 7.0, 2},                    // the job's guidance: cond + uncond rows
      {with({{"steps", 3}, {"shift", 2.5}}), 3, 1.0, 2.5, 1},         // the job's steps and shift
      {with({{"guidance", 1.0}, {"steps", 3}, {"shift", 7}}), 3, 1.0, 7.0, 1},
  };
  for (const auto& c : cases) {
    CAPTURE(boost::json::serialize(c.spec));
    g_transformer_rows = 0;
    g_transformer_calls = 0;
    auto run = run_jobs(pkg, loras.path(), {c.spec}, out.path(), 1, nullptr, "counting");
    auto& job = *run.jobs.at(0);
    REQUIRE_MESSAGE(job.state() == JobState::done, job.snapshot().error);
    const auto& spec = family_job(job)->spec;  // what the job ran with (the result's spec echo)
    CHECK(spec.steps == c.steps);
    CHECK(spec.guidance == c.guidance);
    CHECK(spec.shift == c.shift);
    CHECK(g_transformer_calls.load() == c.steps);
    CHECK(g_transformer_rows.load() == c.steps * c.rows_per_step);
  }
  // Without the LoRA, the package's own steps and guidance (> 1: two rows a step).
  g_transformer_rows = 0;
  g_transformer_calls = 0;
  auto plain = base;
  plain["steps"] = 2;
  auto run = run_jobs(pkg, loras.path(), {plain}, out.path(), 1, nullptr, "counting");
  REQUIRE(run.jobs.at(0)->state() == JobState::done);
  CHECK(family_job(*run.jobs[0])->spec.guidance > 1.0);
  CHECK(g_transformer_rows.load() == 2 * 2);
}

// Jobs whose shifts differ have different sigmas: they must not share a denoise group (whose
// jobs step with one scheduler), and each equals its solo run.
TEST_CASE("jobs with different shifts never share a denoise group; each equals its solo run" * doctest::timeout(600)) {
  const auto pkg = parity_package();
  if (pkg.empty()) {
    WARN_MESSAGE(false, "VGEN_WAN_PARITY_DIR not set: skipped");
    return;
  }
  test::TempDir out;
  const boost::json::object base{{"prompt", "a red circle"}, {"width", 32}, {"height", 32}, {"frames", 5}, {"steps", 2}, {"seed", 1}};
  auto a = base, b = base, c = base;
  a["shift"] = 2.0;
  b["shift"] = 9.0;
  c["shift"] = 2.0;
  c["seed"] = 2;
  std::map<std::string, at::Tensor> batched;
  auto run = run_jobs(pkg, {}, {a, b, c}, out.path(), 3, &batched);
  std::uint64_t groups = 0;
  for (const auto& [size, n] : run.groups) groups += n;
  CHECK(groups == 2);  // a + c, b
  CHECK(run.groups.count(2) == 1);
  const std::vector<boost::json::object> specs{a, b, c};
  for (std::size_t k = 0; k < specs.size(); ++k) {
    REQUIRE_MESSAGE(run.jobs[k]->state() == JobState::done, run.jobs[k]->snapshot().error);
    std::map<std::string, at::Tensor> solo;
    auto s = run_jobs(pkg, {}, {specs[k]}, out.path(), 1, &solo);
    CHECK(max_diff(solo.at(s.jobs[0]->id()), batched.at(run.jobs[k]->id())) <= 1e-4);
  }
  // The shift changes the video (so the checks above can fail).
  CHECK(max_diff(batched.at(run.jobs[0]->id()), batched.at(run.jobs[1]->id())) > 1e-3);

  // A scheduler whose sigmas take no flow shift refuses one, naming the field.
  auto family = load_family(pkg);
  auto ddim = base;
  ddim["scheduler"] = "DDIMScheduler";
  CHECK_NOTHROW(family->validate(ddim));
  ddim["shift"] = 5.0;
  CHECK(error_of([&] { family->validate(ddim); }) == "shift: scheduler DDIMScheduler has no flow shift");
}
