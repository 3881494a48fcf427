#include "tests/support/parity_reference.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "tests/support/family_group.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

namespace vgen::test {

at::Tensor ParityReference::get(const std::string& name) {
  if (!tensors) tensors = torch::jit::load(info["reference"].get<std::string>());
  return tensors->attr(name).toTensor();
}

ParityReference* parity_reference_or_skip(const std::string& env) {
  static std::map<std::string, std::optional<ParityReference>> loaded;  // by variable: tried once
  auto [it, first] = loaded.try_emplace(env);
  if (first) {
    const char* dir = std::getenv(env.c_str());
    if (dir && *dir && std::filesystem::is_regular_file(std::filesystem::path(dir) / "parity.json")) {
      std::ifstream in(std::filesystem::path(dir) / "parity.json");
      it->second = ParityReference{nlohmann::json::parse(in), std::nullopt};
    }
  }
  if (!it->second) {
    const std::string why = env + " not set (no tooling Python): skipped";
    WARN_MESSAGE(false, why);
  }
  return it->second ? &*it->second : nullptr;
}

boost::json::object parity_case_spec(const nlohmann::json& c, double guidance, std::uint64_t seed) {
  return {{"prompt", c["prompt"].get<std::string>()}, {"negative_prompt", c["negative_prompt"].get<std::string>()},
          {"height", c["height"].get<int>()},         {"width", c["width"].get<int>()},
          {"frames", c["num_frames"].get<int>()},     {"steps", c["num_inference_steps"].get<int>()},
          {"guidance", guidance},                     {"seed", seed}};
}

std::string step_key(const std::string& run, int step, const std::string& what) {
  char number[16];
  std::snprintf(number, sizeof number, "_%03d", step);
  return what + "_" + run + number;
}

double worst_step_diff(ParityReference& ref, const std::string& run, const std::vector<at::Tensor>& steps,
                       std::int64_t from_frame) {
  double worst = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto want = ref.get(step_key(run, static_cast<int>(i)));
    const auto frames = want.size(2) - from_frame;
    worst = std::max(worst, max_diff(steps[i].narrow(2, from_frame, frames), want.narrow(2, from_frame, frames)));
  }
  return worst;
}

double frames_diff(ParityReference& ref, const std::string& run, const at::Tensor& frames) {
  return max_diff(frames, ref.get("frames_" + run)[0].permute({0, 2, 3, 1}));
}

void expect_refused(Family& family, const boost::json::object& spec, const std::string& field) {
  try {
    family.validate(spec);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).rfind(field + ":", 0) == 0);
    MESSAGE(std::string(e.what()));
  }
}

}  // namespace vgen::test
