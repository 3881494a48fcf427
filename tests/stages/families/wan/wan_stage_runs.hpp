// Test support for the Wan family's tests (test_wan_family.cpp, test_wan_aoti.cpp): the tiny Wan
// package's diffusers reference (the CTest fixture `stages.wan_parity_reference`), jobs run through
// the real stages with every step's latents and the frames captured, and the checks against the
// reference. LibTorch: include only in tests that link it. Its checks are doctest's DOCTEST_CHECK
// (c10's logging defines a CHECK of its own).
#pragma once

#include "stages/families/wan/wan_family.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json/object.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "stages/exec/model_set.hpp"
#include "tests/support/python_reference.hpp"

namespace vgen::wan_test {

struct Reference {
  nlohmann::json info;
  std::optional<torch::jit::Module> tensors;  // loaded on first use
  at::Tensor get(const std::string& name) {
    if (!tensors) tensors = torch::jit::load(info["reference"].get<std::string>());
    return tensors->attr(name).toTensor();
  }
};

// Builds the tiny Wan pipeline, exports it and runs diffusers' WanPipeline on one case
// (tools/reference/wan_parity.py). Once per test binary: it takes ~20 s.
inline Reference* reference() {
  static std::optional<Reference> ref;
  static bool tried = false;
  if (tried) return ref ? &*ref : nullptr;
  tried = true;
  // The reference is produced once by the CTest fixture `stages.wan_parity_reference`
  // (tools/reference/wan_parity.py, ~20 s), which sets VGEN_WAN_PARITY_DIR for this test.
  const char* dir = std::getenv("VGEN_WAN_PARITY_DIR");
  if (!dir || !*dir || !std::filesystem::is_regular_file(std::filesystem::path(dir) / "parity.json")) return nullptr;
  std::ifstream in(std::filesystem::path(dir) / "parity.json");
  auto info = nlohmann::json::parse(in);
  ref = Reference{info, std::nullopt};
  return &*ref;
}

// The reference, or nullptr after warning that the case is skipped (no tooling Python).
inline Reference* reference_or_skip() {
  auto* ref = reference();
  if (!ref) WARN_MESSAGE(false, "VGEN_WAN_PARITY_DIR not set (no tooling Python): skipped");
  return ref;
}

// A fresh output directory, removed when the case ends.
struct OutDir {
  std::filesystem::path path = vgen::test::temp_dir("vgen-wan-out-");
  ~OutDir() { std::filesystem::remove_all(path); }
};

// What the stages produced for one job, captured by wrapping the stage functions.
struct Capture {
  std::mutex m;
  std::map<std::string, at::Tensor> embeds, frames;
  std::map<std::string, std::vector<std::int64_t>> embed_lengths;
  std::map<std::string, std::vector<at::Tensor>> steps;
  std::map<std::string, std::set<std::string>> devices;  // job -> devices of its stages
};

inline std::vector<StageSpec> capturing(std::vector<StageSpec> stages, Capture& cap) {
  for (auto& s : stages) {
    auto inner = s.fn;
    const auto name = s.name;
    s.fn = [inner, name, &cap](Job& job) -> boost::asio::awaitable<void> {
      if (name == "denoise") {
        auto& w = *family_job(job);
        w.on_step = [&cap, id = job.id()](int, const at::Tensor& latents) {
          std::lock_guard l(cap.m);
          cap.steps[id].push_back(latents.clone());
        };
      }
      co_await inner(job);
      if (const auto* w = dynamic_cast<const WanJob*>(find_family_job(job))) {
        std::lock_guard l(cap.m);
        if (name == "preprocess") {
          cap.embeds[job.id()] = w->embeds.clone();
          cap.embed_lengths[job.id()] = w->embed_lengths;
        }
        if (name == "decode") cap.frames[job.id()] = w->frames.clone();
        if (!w->device.empty()) cap.devices[job.id()].insert(w->device);
      }
    };
  }
  return stages;
}

inline double max_diff(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Runs `jobs` through the real stages on `devices`; returns the finished jobs.
inline std::vector<std::shared_ptr<Job>> run_jobs(const std::filesystem::path& package, const std::string& devices,
                                          const std::vector<boost::json::object>& jobs, Capture& cap,
                                          const std::filesystem::path& out_dir, std::shared_ptr<ModelSet>* keep = nullptr,
                                          std::size_t max_batch = 1, const std::string& cancel_id = {}) {
  const auto specs = parse_device_list(devices);
  Executor executor({.io_threads = 1});
  add_device_pools(executor, specs);
  DevicePool pool(specs);
  ModelSetOptions options;
  options.out_dir = out_dir;
  options.stages["denoise"].workers = specs.size();
  options.stages["preprocess"].workers = specs.size();
  options.batching.max_batch = max_batch;
  options.batching.wait = std::chrono::seconds(20);  // every job joins (they arrive well within it)
  auto runtime = std::make_shared<ModelSet>(std::vector<std::pair<std::string, std::filesystem::path>>{{"m", package}}, executor, pool, options);
  if (keep) *keep = runtime;
  Pipeline pipeline(executor.get_executor(), capturing(runtime->stages(), cap));
  pipeline.start();
  auto submit_all = [&]() -> boost::asio::awaitable<std::vector<std::shared_ptr<Job>>> {
    std::vector<std::shared_ptr<Job>> out;
    for (const auto& j : jobs) out.push_back(co_await pipeline.submit(j));
    if (!cancel_id.empty()) {  // once it is denoising, so that it leaves a running batch
      boost::asio::steady_timer t(co_await boost::asio::this_coro::executor);
      while (out.front()->snapshot().status() != "denoise" || out.front()->snapshot().step < 1) {
        t.expires_after(std::chrono::milliseconds(2));
        co_await t.async_wait(boost::asio::use_awaitable);
      }
      pipeline.cancel(cancel_id);
    }
    co_await pipeline.drain();
    co_return out;
  };
  auto done = executor.run_sync(submit_all());
  executor.stop();
  return done;
}

inline boost::json::object case_json(const nlohmann::json& c, std::uint64_t seed, const std::string& scheduler) {
  boost::json::object o{{"prompt", c["prompt"].get<std::string>()},
                        {"negative_prompt", c["negative_prompt"].get<std::string>()},
                        {"height", c["height"].get<int>()}, {"width", c["width"].get<int>()},
                        {"frames", c["num_frames"].get<int>()}, {"steps", c["num_inference_steps"].get<int>()},
                        {"guidance", c["guidance_scale"].get<double>()}, {"seed", seed}};
  if (!scheduler.empty()) o["scheduler"] = scheduler;
  return o;
}

// Every step's latents and the frames of `job` against the reference tensors named
// latents_<name>_NNN and frames_<name> (diffusers' frames are [1, F, 3, H, W]; ours [F, H, W, 3]).
inline void check_against_reference(Reference& ref, Capture& cap, const Job& job, const std::string& name) {
  CAPTURE(name);
  const auto& got = cap.steps[job.id()];
  const int steps = ref.info["steps"].get<int>();
  REQUIRE(static_cast<int>(got.size()) == steps);
  for (int i = 0; i < steps; ++i) {
    char key[64];
    std::snprintf(key, sizeof key, "latents_%s_%03d", name.c_str(), i);
    CAPTURE(i);
    DOCTEST_CHECK(max_diff(got[i], ref.get(key)) <= 1e-4);
  }
  const double d = max_diff(cap.frames[job.id()], ref.get("frames_" + name)[0].permute({0, 2, 3, 1}));
  MESSAGE(name << ": max |vgen - diffusers| over frames = " << d);
  DOCTEST_CHECK(d <= 1e-3);
}

inline std::shared_ptr<FamilyJob> fresh_job(Family& family, const boost::json::object& spec) {
  return family.create_job(family.validate(spec));
}

}  // namespace vgen::wan_test
