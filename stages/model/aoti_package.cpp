#include "stages/model/aoti_package.hpp"

#include "runtime/errors.hpp"

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/version.h>

#include <charconv>

namespace vgen {

namespace fs = std::filesystem;

std::string torch_release(std::string_view version) { return std::string(version.substr(0, version.find('+'))); }

std::string libtorch_release() { return torch_release(TORCH_VERSION); }

std::vector<std::vector<AotiDimRange>> parse_aoti_input_ranges(std::string_view value) {
  std::vector<std::vector<AotiDimRange>> out;
  auto split = [](std::string_view& rest, char sep) {
    const auto at = rest.find(sep);
    const auto head = rest.substr(0, at);
    rest = at == std::string_view::npos ? std::string_view{} : rest.substr(at + 1);
    return head;
  };
  auto number = [&](std::string_view text) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || end != text.data() + text.size() || text.empty())
      throw_error(ErrorKind::invalid_argument, "compiled model: bad input range '" + truncate_utf8(value, 80) + "'");
    return v;
  };
  for (std::string_view inputs = value;;) {  // ("" is one input with nothing recorded)
    auto input = split(inputs, ';');
    auto& dims = out.emplace_back();
    while (!input.empty()) {
      auto item = split(input, ',');
      const auto dim = number(split(item, ':'));
      const auto min = number(split(item, ':'));
      dims.push_back({dim, min, number(item)});
    }
    if (inputs.empty()) break;
  }
  return out;
}

std::string aoti_model_name(std::string_view method) { return std::string(method) + "-model"; }

std::map<std::string, std::string> aoti_metadata(const fs::path& pt2, std::string_view method) {
  try {
    const auto found = torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(pt2.string(), aoti_model_name(method));
    return {found.begin(), found.end()};
  } catch (const std::exception& e) {
    // c10::Error (without its backtrace) and the loader's std::runtime_errors alike: a damaged or foreign file
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    throw_error(ErrorKind::invalid_argument, "compiled model file '" + pt2.string() + "' is not a readable AOTInductor package (method '" +
                                                 std::string(method) + "'): " +
                                                 truncate_utf8(c10 ? c10->what_without_backtrace() : e.what(), 300));
  }
}

std::string aoti_refusal(const CompiledComponent& c, std::string_view device_type, std::uint64_t verify_limit) {
  const auto name = "compiled model file '" + c.file.string() + "'";
  if (c.backend != "aoti") return name + ": unknown compiled backend '" + truncate_utf8(c.backend, 40) + "'";
  std::error_code ec;
  if (!fs::is_regular_file(c.file, ec)) return name + " is missing";
  if (const auto size = fs::file_size(c.file, ec); ec || size != c.bytes)
    return name + " has " + std::to_string(size) + " bytes, the manifest says " + std::to_string(c.bytes) + " (truncated or replaced)";
  if (c.bytes <= verify_limit && sha256_file(c.file) != c.sha256) return name + " is corrupt (sha256 mismatch)";
  std::map<std::string, std::string> meta;
  try {
    meta = aoti_metadata(c.file);
  } catch (const Error& e) {
    return e.what();
  }
  // AOTI_DEVICE_KEY is AOTInductor's own record of the device type; ours is the exporter's.
  std::string built_for = meta.count(kAotiDeviceKey) ? meta[kAotiDeviceKey] : meta["AOTI_DEVICE_KEY"];
  if (built_for != device_type)
    return name + " was compiled for device type '" + truncate_utf8(built_for, 40) + "', not '" + std::string(device_type) + "'";
  const auto built_with = meta.count(kAotiTorchKey) ? torch_release(meta[kAotiTorchKey]) : torch_release(c.torch);
  if (built_with.empty()) return name + " does not record the torch version it was compiled with";
  if (built_with != libtorch_release())
    return name + " was compiled with torch " + truncate_utf8(built_with, 40) + ", this vgen runs LibTorch " + libtorch_release();
  return {};
}

}  // namespace vgen
