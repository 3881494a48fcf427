#include "stages/exec/result_latents.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/content_key.hpp"
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
constexpr std::string_view kSuffix = ".latents";
constexpr std::size_t kHexLength = 64;

std::string identity(const std::string& package_id, const std::string& sha256) {
  return "result-latents|" + package_id + "|" + sha256;
}

fs::path folder_of(const fs::path& folder) { return folder / ".vgen-latents"; }

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "<name>.<64 hex>.latents" -> whether it is one of `output_name`'s (its name, then a hash).
bool is_latents_of(const std::string& file, const std::string& output_name) {
  const auto fixed = output_name.size() + 1 + kHexLength + kSuffix.size();
  return file.size() == fixed && file.compare(0, output_name.size(), output_name) == 0 && file[output_name.size()] == '.' &&
         ends_with(file, kSuffix);
}

// The latents files kept for `output` (listed first: the callers remove some).
std::vector<fs::path> latents_of(const fs::path& output) {
  std::vector<fs::path> out;
  const auto name = output.filename().string();
  std::error_code ec;
  for (fs::directory_iterator it(folder_of(output.parent_path()), ec), end; !ec && it != end; it.increment(ec))
    if (is_latents_of(it->path().filename().string(), name)) out.push_back(it->path());
  return out;
}

}  // namespace

fs::path result_latents_file(const fs::path& output, const std::string& sha256) {
  return folder_of(output.parent_path()) / (output.filename().string() + "." + sha256 + std::string(kSuffix));
}

fs::path keep_result_latents(const fs::path& output, const std::string& package_id, const at::Tensor& latents) {
  const auto sha = sha256_file(output);
  StepState state;
  state.step = kStep;
  state.latents = latents.to(at::kCPU).to(at::kFloat).contiguous();
  const auto file = result_latents_file(output, sha);
  fs::create_directories(file.parent_path());
  write_file_atomically(file, encode_checkpoint(identity(package_id, sha), kTotal, state));
  // An output written over (a job name given twice): its old bytes' latents go.
  for (const auto& old : latents_of(output))
    if (old != file) {
      std::error_code ignored;
      fs::remove(old, ignored);
    }
  return file;
}

FoundLatents find_kept_result_latents(const std::vector<fs::path>& folders, const std::string& sha256, const std::string& package_id) {
  if (sha256.size() != kHexLength) return {};
  const std::string tail = "." + sha256 + std::string(kSuffix);
  for (const auto& folder : folders) {
    std::error_code ec;
    for (fs::directory_iterator it(folder_of(folder), ec), end; !ec && it != end; it.increment(ec)) {
      const auto name = it->path().filename().string();
      if (name.size() <= tail.size() || !ends_with(name, tail)) continue;
      std::ifstream in(it->path(), std::ios::binary);
      if (!in) continue;
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      StepState state;
      if (decode_checkpoint(bytes, identity(package_id, sha256), kTotal, state) && state.latents.defined() &&
          state.latents.dim() == 5)
        return {it->path(), content_key_bytes(bytes).hex(), std::move(state.latents)};
    }
  }
  return {};
}

at::Tensor find_result_latents(const std::vector<fs::path>& folders, const std::string& sha256, const std::string& package_id) {
  return find_kept_result_latents(folders, sha256, package_id).latents;
}

int remove_result_latents(const fs::path& output) {
  int removed = 0;
  for (const auto& file : latents_of(output)) {
    std::error_code ignored;
    if (fs::remove(file, ignored)) ++removed;
  }
  std::error_code ec;
  fs::remove(folder_of(output.parent_path()), ec);  // only when empty
  return removed;
}

}  // namespace vgen
