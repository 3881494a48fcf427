// Which model backend serves each component, per device: the choice between a component's
// compiled file for the device's type (components.<name>.compiled, an AOTInductor .pt2) and its
// own file (TorchScript), and the process's record of what actually serves each loaded one,
// for logs, `vgen devices --model` and /metrics.
//
// The choice: the compiled file when the package has one for the device type, the preference
// allows it ("auto"; any other preference names the backend for the component's own file, e.g.
// "torchscript", never a compiled one) and it is not refused (aoti_package.hpp:
// missing, damaged, built for another device type or torch version); else the component's own
// file with the backend its format names, and the reason. A component that is only a .pt2
// (format "aoti") has nothing to fall back to: its refusal is the component's error.
// Thread-safety: safe from any thread. A refusal is logged (warning) once per file and device.
// No LibTorch in this header (api/ includes it).
#pragma once

#include "stages/model/model_package.hpp"

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

struct ComponentBackend {
  std::filesystem::path package;  // the package's folder
  std::string component;          // "transformer"
  std::string device;             // "cpu:0", "cuda:1" (as the caller named it)
  std::string backend;            // the backend that serves it: "aoti", "torchscript"
  std::filesystem::path file;     // the file that serves it
  std::string refused;            // why the compiled file was not taken ("" when there was none, or it serves)
};

// "cpu" of "cpu:1", "cuda" of "cuda:0".
std::string device_type_of(std::string_view device);

// What would serve `component` of `package` on `device` (no module is loaded; the compiled
// file's metadata is read). Error(invalid_argument) when the package has no such component,
// or nothing can serve it (a refused .pt2 with no TorchScript file).
ComponentBackend plan_component_backend(const ModelPackage& package, const std::string& component,
                                        std::string_view device, std::string_view preference = "auto");

// The record (ModuleCache::get_component adds each component it loads, with a refusal found
// only when loading); the latest entry per (package, component, device) is kept.
void record_component_backend(const ComponentBackend& entry);
std::vector<ComponentBackend> component_backends();
void clear_component_backends();  // tests

}  // namespace vgen
