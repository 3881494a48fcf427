#include "stages/families/hunyuan15/hunyuan15_family.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <cstdlib>
#include <fstream>
#include <mutex>

#include "runtime/errors.hpp"
#include "stages/exec/model_set.hpp"
#include "tests/support/family_group.hpp"
#include "tests/support/invalid_argument.hpp"
#include "tests/support/parity_reference.hpp"
#include "tests/support/python_reference.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

using test::check_invalid;
using Reference = test::ParityReference;

// Written once by the CTest fixture `stages.hunyuan15_parity_reference` (tools/reference/hunyuan15_parity.py).
Reference* reference_or_skip() { return test::parity_reference_or_skip("VGEN_HUNYUAN15_PARITY_DIR"); }

struct OutDir {
  fs::path path = vgen::test::temp_dir("vgen-hy15-out-");
  ~OutDir() { fs::remove_all(path); }
};

// Every step's latents and the frames of each job, captured around the real stages.
struct Capture {
  std::mutex m;
  std::map<std::string, at::Tensor> frames;
  std::map<std::string, std::vector<at::Tensor>> steps;
};

std::vector<StageSpec> capturing(std::vector<StageSpec> stages, Capture& cap) {
  for (auto& s : stages) {
    auto inner = s.fn;
    const auto name = s.name;
    s.fn = [inner, name, &cap](Job& job) -> asio::awaitable<void> {
      if (name == "denoise")
        family_job(job)->on_step = [&cap, id = job.id()](int, const at::Tensor& latents) {
          std::lock_guard l(cap.m);
          cap.steps[id].push_back(latents.clone());
        };
      co_await inner(job);
      if (name == "decode") {
        std::lock_guard l(cap.m);
        cap.frames[job.id()] = family_job(job)->frames.clone();
      }
    };
  }
  return stages;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

std::vector<std::shared_ptr<Job>> run_jobs(const fs::path& package, const std::vector<boost::json::object>& jobs, Capture& cap,
                                          const fs::path& out_dir, std::shared_ptr<ModelSet>* keep = nullptr,
                                          std::size_t max_batch = 1) {
  const auto specs = parse_device_list("cpu");
  Executor executor({.io_threads = 1});
  add_device_pools(executor, specs);
  DevicePool pool(specs);
  ModelSetOptions options;
  options.out_dir = out_dir;
  options.batching.max_batch = max_batch;
  options.batching.wait = std::chrono::seconds(20);  // every job joins (they arrive well within it)
  auto models = std::make_shared<ModelSet>(std::vector<std::pair<std::string, fs::path>>{{"m", package}}, executor, pool, options);
  if (keep) *keep = models;
  Pipeline pipeline(executor.get_executor(), capturing(models->stages(), cap));
  pipeline.start();
  auto submit_all = [&]() -> asio::awaitable<std::vector<std::shared_ptr<Job>>> {
    std::vector<std::shared_ptr<Job>> out;
    for (const auto& j : jobs) out.push_back(co_await pipeline.submit(j));
    co_await pipeline.drain();
    co_return out;
  };
  auto done = executor.run_sync(submit_all());
  executor.stop();
  return done;
}

boost::json::object case_json(const nlohmann::json& c, std::uint64_t seed) {
  return test::parity_case_spec(c, c["guidance_scale"].get<double>(), seed);
}

}  // namespace

TEST_CASE("glyph texts are the pipeline's extract_glyph_texts: quoted, deduplicated, formatted") {
  CHECK(!hunyuan15_glyph_text("no quotes here"));
  CHECK(!hunyuan15_glyph_text("an \"open quote"));
  CHECK(!hunyuan15_glyph_text("a \"line\nbreak\" inside"));  // . does not match a line break
  CHECK(*hunyuan15_glyph_text("a sign \"OPEN\"") == "Text \"OPEN\". ");
  CHECK(*hunyuan15_glyph_text("\"A\" and \"A\"") == "Text \"A\". ");  // deduplicated when more than one
  CHECK(*hunyuan15_glyph_text("\"A\" \xE2\x80\x9C" "B\xE2\x80\x9D \"C\"") == "Text \"A\". Text \"B\". Text \"C\". ");
  CHECK(*hunyuan15_glyph_text("\"\"") == "Text \"\". ");
}

TEST_CASE("ByT5 ids are bytes + offset, cut before </s>, right-padded") {
  std::int64_t ids[6];
  float mask[6];
  byt5_ids("ab\xC3\xA9", 6, 3, 1, 0, ids, mask);
  CHECK(std::vector<std::int64_t>(ids, ids + 6) == std::vector<std::int64_t>{'a' + 3, 'b' + 3, 0xC3 + 3, 0xA9 + 3, 1, 0});
  CHECK(std::vector<float>(mask, mask + 6) == std::vector<float>{1, 1, 1, 1, 1, 0});
  byt5_ids("abcdefgh", 4, 3, 1, 0, ids, mask);  // truncated: three bytes, then </s>
  CHECK(std::vector<std::int64_t>(ids, ids + 4) == std::vector<std::int64_t>{'a' + 3, 'b' + 3, 'c' + 3, 1});
  // ByT5Tokenizer's added tokens (ids as transformers 5.23's ByT5Tokenizer gives them, add_special_tokens
  // False; the exporter checks the same rule against the package's tokenizer_2 on such probes).
  const auto special = [](const std::string& text, std::size_t real) {
    std::vector<std::int64_t> buf(32);
    std::vector<float> m(32);
    byt5_ids(text, 32, 3, 1, 0, buf.data(), m.data());
    return std::vector<std::int64_t>(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(real));
  };
  CHECK(special("a</s>b<pad>c<unk>d<extra_id_3>e<extra_id_0><extra_id_124>", 11) ==
        std::vector<std::int64_t>{100, 1, 101, 0, 102, 2, 103, 262, 104, 259, 383});
  CHECK(special("x <pad> y", 3) == std::vector<std::int64_t>{123, 0, 124});  // <pad> strips the spaces around it
  CHECK(special("x<extra_id_3 y", 14) ==
        std::vector<std::int64_t>{123, 63, 104, 123, 119, 117, 100, 98, 108, 103, 98, 54, 35, 124});
}

TEST_CASE("guidance runs unless the scale is 1, as ClassifierFreeGuidance decides") {
  CHECK(!hunyuan15_uses_guidance(1.0));
  CHECK(hunyuan15_uses_guidance(6.0));
  CHECK(hunyuan15_uses_guidance(0.5));  // diffusers still guides below 1
}

TEST_CASE("the manifest's text and vae sections are read; what is wrong is named") {
  ModelPackage p;
  p.dir = "pkg";
  boost::json::object m;
  check_invalid([&] { read_hunyuan15_config(p, m); }, "'text'");
  m = {{"text", {{"template", "{system}|{prompt}"}, {"system_message", "S"}, {"crop_start", 2}, {"max_length", 8},
                 {"byt5", {{"max_length", 16}, {"offset", 3}, {"eos_id", 1}, {"pad_id", 0}, {"output_dim", 24}}}}},
       {"vae", {{"scaling_factor", 1.03682}}}};
  const auto c = read_hunyuan15_config(p, m);
  CHECK(c.crop_start == 2);
  CHECK(c.glyph_dim == 24);
  m["text"].as_object()["template"] = "{prompt} only";
  check_invalid([&] { read_hunyuan15_config(p, m); }, "text.template");
  m["text"].as_object()["template"] = "{system}|{prompt}";
  m["vae"].as_object()["scaling_factor"] = -1;
  check_invalid([&] { read_hunyuan15_config(p, m); }, "vae.scaling_factor");
}

TEST_CASE("vgen's HunyuanVideo 1.5 stages reproduce diffusers' HunyuanVideo15Pipeline, every step and the frames" *
          doctest::timeout(900)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const OutDir out;
  const auto seed = ref->info["seed"].get<std::uint64_t>();
  const auto& cases = ref->info["cases"];
  const std::vector<std::string> names{"cfg", "cfg_plain", "nocfg"};
  std::vector<boost::json::object> specs;
  for (const auto& n : names) specs.push_back(case_json(cases[n], seed));
  Capture cap;
  auto jobs = run_jobs(ref->info["package"].get<std::string>(), specs, cap, out.path);
  REQUIRE(jobs.size() == names.size());
  for (std::size_t n = 0; n < names.size(); ++n) {
    const auto& name = names[n];
    CAPTURE(name);
    REQUIRE_MESSAGE(jobs[n]->state() == JobState::done, jobs[n]->snapshot().error);
    const auto& got = cap.steps[jobs[n]->id()];
    const int steps = cases[name]["num_inference_steps"].get<int>();
    REQUIRE(static_cast<int>(got.size()) == steps);
    const double worst = test::worst_step_diff(*ref, name, got);
    const double frames = test::frames_diff(*ref, name, cap.frames[jobs[n]->id()]);
    MESSAGE(name << ": max |vgen - diffusers| over every step's latents = " << worst << ", over frames = " << frames);
    CHECK(worst <= 1e-4);
    CHECK(frames <= 1e-4);
  }
}

TEST_CASE("cross-job batching: different prompts (with and without glyphs), seeds and guidance share calls; each equals its solo run" *
          doctest::timeout(900)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  const OutDir out;
  const auto pkg = ref->info["package"].get<std::string>();
  std::vector<boost::json::object> specs;
  const char* prompts[] = {"a neon sign that says \"OPEN\"", "a blue square moving up", "a shop window \xE2\x80\x9C" "SALE\xE2\x80\x9D"};
  for (int i = 0; i < 3; ++i) {
    auto s = case_json(ref->info["cases"]["cfg"], 300 + i);
    s["prompt"] = prompts[i];
    s["guidance"] = 2.0 + i;
    specs.push_back(s);
  }
  Capture batched;
  std::shared_ptr<ModelSet> models;
  auto jobs = run_jobs(pkg, specs, batched, out.path, &models, 3);
  const auto groups = models->group_sizes("denoise");
  CHECK(groups.size() == 1);
  CHECK(groups.count(3) == 1);  // one transformer batch of three jobs
  double worst = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    REQUIRE_MESSAGE(jobs[i]->state() == JobState::done, jobs[i]->snapshot().error);
    Capture alone;
    auto single = run_jobs(pkg, {specs[i]}, alone, out.path);
    const auto& a = alone.steps[single[0]->id()];
    const auto& b = batched.steps[jobs[i]->id()];
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k) worst = std::max(worst, max_diff(a[k], b[k]));
    worst = std::max(worst, max_diff(alone.frames[single[0]->id()], batched.frames[jobs[i]->id()]));
  }
  MESSAGE("batched vs solo: max |diff| over latents and frames = " << worst);
  CHECK(worst <= 1e-4);
  CHECK(max_diff(batched.frames[jobs[0]->id()], batched.frames[jobs[1]->id()]) > 1e-3);  // the rows differ
}

// A job joining a running group mid-denoise (the real Batcher and step loop) ends as it would
// alone, and so does the job it joined (another prompt, seed and guidance).
TEST_CASE("a HunyuanVideo 1.5 job joining a running group at step 1 ends within 1e-4 of its solo run" * doctest::timeout(900)) {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  auto other = case_json(ref->info["cases"]["cfg"], 301);
  other["prompt"] = "a blue square moving up";
  other["guidance"] = 3.0;
  const boost::json::object specs[] = {case_json(ref->info["cases"]["cfg"], 300), other};
  auto make = [&](int i) { return family->create_job(family->validate(specs[i])); };
  test::check_joined_equals_solo(family, make, 1, "hunyuan15");
}

TEST_CASE("job limits come from the manifest: sizes multiple of 16, frames 4k+1; LoRAs and images refused by name") {
  auto* ref = reference_or_skip();
  if (!ref) return;
  register_builtin_families();
  auto family = load_family(ref->info["package"].get<std::string>());
  CHECK(family->package().family == "hunyuan-video-1.5");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "x"}, {"width", 40}}); }, "width");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "x"}, {"height", 24}}); }, "height");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "x"}, {"frames", 7}}); }, "frames");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "x"}, {"loras", boost::json::array{boost::json::object{{"name", "x"}}}}}); },
                "loras: not supported");
  check_invalid([&] { family->validate(boost::json::object{{"prompt", "x"}, {"image", "/tmp/x.png"}}); }, "image");
  const auto spec = family->validate(boost::json::object{{"prompt", "x"}});
  CHECK(spec.width % 16 == 0);
  CHECK(spec.negative_prompt.empty());
  CHECK_NOTHROW(family->warm_up("cpu"));
}
