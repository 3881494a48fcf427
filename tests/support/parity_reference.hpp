// Test support: the reference a family's parity fixture wrote (tools/reference/<family>_parity.py
// via vgen_parity_fixture in tests/CMakeLists.txt): parity.json (`info`) and the tensors file it
// names, loaded on first use. parity_reference_or_skip(env) reads the directory CTest passes in
// `env` once per process; without it (a build without the tooling Python) it warns and returns
// nullptr so the case skips. The helpers below are what every family's parity test does with a
// reference: its case as a job spec, its per-step latents and frames against a run, a refusal.
// LibTorch: only for tests that link it (the vgen_parity_reference library, tests/CMakeLists.txt).
// Thread-safety: none (doctest runs the cases of one test on one thread).
#pragma once

#include "stages/families/family.hpp"

#include <ATen/ATen.h>
#include <boost/json/object.hpp>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace vgen::test {

struct ParityReference {
  nlohmann::json info;
  std::optional<torch::jit::Module> tensors;
  at::Tensor get(const std::string& name);  // a tensor of the reference file (loaded on first use)
};

ParityReference* parity_reference_or_skip(const std::string& env);

// A case of the reference ({prompt, negative_prompt, height, width, num_frames,
// num_inference_steps}, diffusers' argument names) as a job spec with this guidance and seed.
boost::json::object parity_case_spec(const nlohmann::json& c, double guidance, std::uint64_t seed);

// The key of the reference's latents after step `step` of run `run`: "latents_<run>_<NNN>" (`what`:
// another per-step tensor, e.g. LTX-2's "audio").
std::string step_key(const std::string& run, int step, const std::string& what = "latents");

// The largest |vgen - diffusers| over a run's steps (`steps`: one job's latents after each step,
// as test::run_group returns them), each REQUIREd to have the reference's shape (max_diff); latent
// frames before `from_frame` (a clean prefix that diffusers keeps apart) are left out.
double worst_step_diff(ParityReference& ref, const std::string& run, const std::vector<at::Tensor>& steps,
                       std::int64_t from_frame = 0);

// |vgen - diffusers| of a job's decoded frames ([F, H, W, 3]) and the reference's "frames_<run>"
// ([1, F, 3, H, W]).
double frames_diff(ParityReference& ref, const std::string& run, const at::Tensor& frames);

// family.validate(spec) is refused with Error(invalid_argument) whose message starts "<field>:".
void expect_refused(Family& family, const boost::json::object& spec, const std::string& field);

// A job of `family` for `spec`, validated as the runtime validates it, as the family's job type.
template <class Job>
std::shared_ptr<Job> validated_job(Family& family, const boost::json::object& spec) {
  return std::static_pointer_cast<Job>(family.create_job(family.validate(spec)));
}

}  // namespace vgen::test
