#include "stages/exec/result_latents.hpp"

#include "runtime/atomic_file.hpp"
#include "stages/exec/checkpoint.hpp"
#include "stages/families/family.hpp"
#include "stages/model/model_package.hpp"

#include <ATen/ATen.h>

#include <fstream>
#include <iterator>

namespace vgen {

namespace fs = std::filesystem;

namespace {

// The checkpoint format wants a step inside its total: a finished result is "step 1 of 2".
constexpr int kTotal = 2, kStep = 1;

std::string identity(const std::string& package_id, const std::string& sha256) {
  return "result-latents|" + package_id + "|" + sha256;
}

}  // namespace

fs::path result_latents_file(const fs::path& folder, const std::string& sha256) {
  return folder / ".vgen-latents" / (sha256 + ".latents");
}

fs::path keep_result_latents(const fs::path& output, const std::string& package_id, const at::Tensor& latents) {
  const auto sha = sha256_file(output);
  StepState state;
  state.step = kStep;
  state.latents = latents.to(at::kCPU).to(at::kFloat).contiguous();
  const auto file = result_latents_file(output.parent_path(), sha);
  fs::create_directories(file.parent_path());
  write_file_atomically(file, encode_checkpoint(identity(package_id, sha), kTotal, state));
  return file;
}

at::Tensor find_result_latents(const std::vector<fs::path>& folders, const std::string& sha256, const std::string& package_id) {
  if (sha256.empty()) return {};
  for (const auto& folder : folders) {
    std::ifstream in(result_latents_file(folder, sha256), std::ios::binary);
    if (!in) continue;
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    StepState state;
    if (decode_checkpoint(bytes, identity(package_id, sha256), kTotal, state) && state.latents.defined() && state.latents.dim() == 5)
      return state.latents;
  }
  return {};
}

}  // namespace vgen
