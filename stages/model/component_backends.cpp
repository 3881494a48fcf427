#include "stages/model/component_backends.hpp"

#include "runtime/errors.hpp"
#include "stages/model/aoti_package.hpp"

#include <spdlog/spdlog.h>

#include <map>
#include <mutex>
#include <set>
#include <tuple>

namespace vgen {

namespace {

struct Record {
  std::mutex mutex;
  std::map<std::tuple<std::string, std::string, std::string>, ComponentBackend> entries;
  std::set<std::string> logged;  // file + device of each refusal already logged
};

Record& record() {
  static Record r;
  return r;
}

}  // namespace

std::string device_type_of(std::string_view device) { return std::string(device.substr(0, device.find(':'))); }

ComponentBackend plan_component_backend(const ModelPackage& package, const std::string& component, std::string_view device,
                                        std::string_view preference) {
  const auto& c = package.component(component);
  ComponentBackend out{.package = package.dir, .component = component, .device = std::string(device),
                       .backend = c.format, .file = c.file, .refused = {}};
  const auto type = device_type_of(device);
  if (c.format == "aoti") {  // only a .pt2: its refusal is the component's error
    const CompiledComponent self{.backend = "aoti", .file = c.file, .sha256 = c.sha256, .bytes = c.bytes, .torch = {}};
    if (auto why = aoti_refusal(self, type); !why.empty())
      throw_error(ErrorKind::invalid_argument, "component '" + component + "' has no TorchScript file to fall back to: " + why);
    return out;
  }
  if (preference != "auto") {  // a backend by name for the component's own file (tests plug their own in)
    out.backend = std::string(preference);
    return out;
  }
  const auto it = c.compiled.find(type);
  if (it == c.compiled.end()) return out;
  if (auto why = aoti_refusal(it->second, type); !why.empty()) {
    out.refused = std::move(why);
    return out;
  }
  out.backend = it->second.backend;
  out.file = it->second.file;
  return out;
}

void record_component_backend(const ComponentBackend& entry) {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  r.entries[{entry.package.string(), entry.component, entry.device}] = entry;
  if (!entry.refused.empty() && r.logged.insert(entry.refused + '\n' + entry.device).second)
    spdlog::warn("model backend: component '{}' on {} runs {} ({}): {}", entry.component, entry.device, entry.backend,
                 entry.file.filename().string(), entry.refused);
}

std::vector<ComponentBackend> component_backends() {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  std::vector<ComponentBackend> out;
  for (const auto& [_, e] : r.entries) out.push_back(e);
  return out;
}

void clear_component_backends() {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  r.entries.clear();
  r.logged.clear();
}

}  // namespace vgen
