#include "stages/model/model_backend_options.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"

#include <optional>
#include <string>
#include <vector>

using namespace vgen;

namespace {

const std::optional<bool> kAuto;

ModelBackendOptions options(std::optional<bool> fusion, std::optional<bool> optimize) {
  return ModelBackendOptions{.torchscript_gpu_fusion = fusion, .torchscript_gpu_optimize = optimize};
}

std::string check_error(const ModelBackendOptions& o) {
  try {
    check_model_backend_options(o);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("torchscript_optimizes: a CPU ignores the options; CUDA follows torchscript_gpu_optimize, auto answers as a CPU, fusion on optimises") {
  for (const auto fusion : {kAuto, std::optional<bool>(false), std::optional<bool>(true)}) {
    for (const auto optimize : {kAuto, std::optional<bool>(false), std::optional<bool>(true)}) {
      CAPTURE(fusion.value_or(-1));
      CAPTURE(optimize.value_or(-1));
      const auto o = options(fusion, optimize);
      // CPU: the denoiser optimised, once-per-job modules as exported, as before the setting.
      CHECK(torchscript_optimizes(false, TorchScriptCalls::every_step, o));
      CHECK_FALSE(torchscript_optimizes(false, TorchScriptCalls::once_per_job, o));
      // CUDA: fusion on optimises everything; a set optimize is one answer for both kinds of
      // calls; "auto" answers as a CPU does.
      const bool every = fusion == true || optimize != false;
      const bool once = fusion == true || optimize == true;
      CHECK(torchscript_optimizes(true, TorchScriptCalls::every_step, o) == every);
      CHECK(torchscript_optimizes(true, TorchScriptCalls::once_per_job, o) == once);
    }
  }
  // The cases the setting is for, spelled out.
  CHECK_FALSE(torchscript_optimizes(true, TorchScriptCalls::every_step, options(kAuto, false)));
  CHECK_FALSE(torchscript_optimizes(true, TorchScriptCalls::once_per_job, options(false, false)));
  CHECK_FALSE(torchscript_optimizes(true, TorchScriptCalls::once_per_job, ModelBackendOptions{}));  // auto: the VAE as exported
  CHECK(torchscript_optimizes(true, TorchScriptCalls::every_step, ModelBackendOptions{}));          // auto: the denoiser optimised
  CHECK(torchscript_optimizes(true, TorchScriptCalls::once_per_job, options(kAuto, true)));
  CHECK(torchscript_optimizes(true, TorchScriptCalls::every_step, options(true, kAuto)));
  CHECK(torchscript_optimizes(true, TorchScriptCalls::once_per_job, options(true, kAuto)));
}

TEST_CASE("model_backend.attention: names PyTorch's backends, most preferred first; the rest follow in PyTorch's order") {
  CHECK(attention_backend_names() == std::vector<std::string>{"flash", "efficient", "math", "cudnn"});
  CHECK(attention_priority_order({}) == attention_backend_names());
  CHECK(attention_priority_order({"cudnn"}) == std::vector<std::string>{"cudnn", "flash", "efficient", "math"});
  CHECK(attention_priority_order({"efficient", "cudnn"}) == std::vector<std::string>{"efficient", "cudnn", "flash", "math"});

  ModelBackendOptions o;
  o.attention = {"cudnn", "flash"};
  CHECK(check_error(o).empty());
  o.attention = {"cudnn", "flash3"};
  auto error = check_error(o);
  CHECK(error.find("model_backend.attention") != std::string::npos);
  CHECK(error.find("'flash3'") != std::string::npos);
  CHECK(error.find("known: flash, efficient, math, cudnn") != std::string::npos);
  o.attention = {"flash", "cudnn", "flash"};
  error = check_error(o);
  CHECK(error.find("'flash' is listed twice") != std::string::npos);

  // Stored with the rest, read back whole.
  o.attention = {"cudnn"};
  o.torchscript_gpu_optimize = false;
  set_model_backend_options(o);
  CHECK(model_backend_options().attention == std::vector<std::string>{"cudnn"});
  CHECK(model_backend_options().torchscript_gpu_optimize == std::optional<bool>(false));
  set_model_backend_options({});
  CHECK(model_backend_options().attention.empty());
}

TEST_CASE("check_model_backend_options: optimize false with fusion true is refused naming both fields; every other pair passes") {
  const auto error = check_error(options(true, false));
  CHECK(error.find("model_backend.torchscript_gpu_optimize false") != std::string::npos);
  CHECK(error.find("model_backend.torchscript_gpu_fusion true") != std::string::npos);
  for (const auto fusion : {kAuto, std::optional<bool>(false), std::optional<bool>(true)})
    for (const auto optimize : {kAuto, std::optional<bool>(false), std::optional<bool>(true)})
      if (!(fusion == true && optimize == false)) CHECK(check_error(options(fusion, optimize)).empty());
}

TEST_CASE("fuse_when_auto: a long-lived process fuses unless the optimiser is off; set values stay") {
  auto o = options(kAuto, kAuto);
  fuse_when_auto(o);
  CHECK(o.torchscript_gpu_fusion == std::optional<bool>(true));
  o = options(kAuto, true);
  fuse_when_auto(o);
  CHECK(o.torchscript_gpu_fusion == std::optional<bool>(true));
  o = options(kAuto, false);
  fuse_when_auto(o);
  CHECK(o.torchscript_gpu_fusion == std::optional<bool>(false));
  CHECK(check_error(o).empty());  // the service starts
  o = options(false, kAuto);
  fuse_when_auto(o);
  CHECK(o.torchscript_gpu_fusion == std::optional<bool>(false));
  o = options(true, false);  // refused by the check, not changed here
  fuse_when_auto(o);
  CHECK(o.torchscript_gpu_fusion == std::optional<bool>(true));
}

TEST_CASE("set_model_backend_options: every pair reads back as set; the default is all auto") {
  const auto before = model_backend_options();
  CHECK_FALSE(before.torchscript_gpu_fusion.has_value());
  CHECK_FALSE(before.torchscript_gpu_optimize.has_value());
  for (const auto fusion : {kAuto, std::optional<bool>(false), std::optional<bool>(true)}) {
    for (const auto optimize : {kAuto, std::optional<bool>(false), std::optional<bool>(true)}) {
      for (const bool graphs : {false, true}) {  // cuda_graphs shares the word: no field disturbs another
        auto o = options(fusion, optimize);
        o.cuda_graphs = graphs;
        set_model_backend_options(o);
        const auto now = model_backend_options();
        CHECK(now.torchscript_gpu_fusion == fusion);
        CHECK(now.torchscript_gpu_optimize == optimize);
        CHECK(now.cuda_graphs == graphs);
      }
    }
  }
  set_model_backend_options(before);
}

TEST_CASE("model_backend.cuda_graphs: off by default, and no pair of the other options refuses it") {
  CHECK_FALSE(ModelBackendOptions{}.cuda_graphs);
  CHECK_FALSE(model_backend_options().cuda_graphs);
  for (const auto fusion : {kAuto, std::optional<bool>(false), std::optional<bool>(true)}) {
    auto o = options(fusion, kAuto);
    o.cuda_graphs = true;
    CHECK(check_error(o).empty());
  }
}
