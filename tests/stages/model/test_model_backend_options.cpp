#include "stages/model/model_backend_options.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"

#include <optional>
#include <string>

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

TEST_CASE("torchscript_optimizes: a CPU ignores the options; CUDA follows torchscript_gpu_optimize, auto and fusion on optimise") {
  for (const auto fusion : {kAuto, std::optional<bool>(false), std::optional<bool>(true)}) {
    for (const auto optimize : {kAuto, std::optional<bool>(false), std::optional<bool>(true)}) {
      CAPTURE(fusion.value_or(-1));
      CAPTURE(optimize.value_or(-1));
      const auto o = options(fusion, optimize);
      // CPU: the denoiser optimised, once-per-job modules as exported, as before the setting.
      CHECK(torchscript_optimizes(false, TorchScriptCalls::every_step, o));
      CHECK_FALSE(torchscript_optimizes(false, TorchScriptCalls::once_per_job, o));
      // CUDA: one answer for both kinds of calls.
      const bool want = fusion == true || optimize != false;
      CHECK(torchscript_optimizes(true, TorchScriptCalls::every_step, o) == want);
      CHECK(torchscript_optimizes(true, TorchScriptCalls::once_per_job, o) == want);
    }
  }
  // The cases the setting is for, spelled out.
  CHECK_FALSE(torchscript_optimizes(true, TorchScriptCalls::every_step, options(kAuto, false)));
  CHECK_FALSE(torchscript_optimizes(true, TorchScriptCalls::once_per_job, options(false, false)));
  CHECK(torchscript_optimizes(true, TorchScriptCalls::once_per_job, ModelBackendOptions{}));  // auto: as today
  CHECK(torchscript_optimizes(true, TorchScriptCalls::every_step, options(true, kAuto)));
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
      set_model_backend_options(options(fusion, optimize));
      const auto now = model_backend_options();
      CHECK(now.torchscript_gpu_fusion == fusion);
      CHECK(now.torchscript_gpu_optimize == optimize);
    }
  }
  set_model_backend_options(before);
}
