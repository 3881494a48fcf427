#include "stages/model/lora_files.hpp"

#include "runtime/errors.hpp"

#include <algorithm>
#include <string_view>
#include <system_error>

namespace vgen {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSuffix = ".safetensors";

bool ends_with(const std::string& s, std::string_view x) { return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0; }

}  // namespace

fs::path resolve_lora_file(const fs::path& lora_dir, const std::string& name) {
  auto bad = [&](const std::string& what) -> fs::path {
    throw_error(ErrorKind::invalid_argument, "loras: '" + truncate_utf8(name, 100) + "': " + what);
  };
  if (lora_dir.empty()) return bad("no lora_dir is configured (--lora-dir)");
  if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos || name[0] == '.')
    return bad("not a file name");
  std::error_code ec;
  const auto dir = fs::canonical(lora_dir, ec);
  if (ec) return bad("lora_dir '" + lora_dir.string() + "' does not exist");
  const auto file = dir / (ends_with(name, kSuffix) ? name : name + std::string(kSuffix));
  const auto real = fs::canonical(file, ec);
  if (ec) return bad("unknown LoRA (no " + file.filename().string() + " in " + dir.string() + ")");
  const auto rel = real.lexically_relative(dir);
  if (rel.empty() || *rel.begin() == "..") return bad("resolves outside lora_dir");
  if (!fs::is_regular_file(real, ec)) return bad("not a regular file");
  return real;
}

std::vector<LoraFileEntry> list_lora_files(const fs::path& lora_dir) {
  std::vector<LoraFileEntry> out;
  std::error_code ec;
  if (lora_dir.empty() || !fs::is_directory(lora_dir, ec)) return out;
  for (fs::directory_iterator it(lora_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto file = it->path().filename().string();
    if (!ends_with(file, kSuffix) || file.size() == kSuffix.size()) continue;
    const auto name = file.substr(0, file.size() - kSuffix.size());
    try {
      const auto real = resolve_lora_file(lora_dir, name);  // the same rule a job's name meets
      std::error_code size_ec;
      const auto bytes = fs::file_size(real, size_ec);
      if (!size_ec) out.push_back({name, bytes});
    } catch (const Error&) {
      // hidden, outside lora_dir, not a regular file: not offered
    }
  }
  std::sort(out.begin(), out.end(), [](const LoraFileEntry& a, const LoraFileEntry& b) { return a.name < b.name; });
  return out;
}

}  // namespace vgen
