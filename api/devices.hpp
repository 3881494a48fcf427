// The devices a --devices list resolves to on this machine (`vgen devices`), with the CUDA
// discovery of the build: LibTorch's in a build with it (stages/model/torch_devices.hpp), none in a
// build without (then "cuda" entries fail as on a machine without a GPU).
// Thread-safety: safe from any thread. Blocking: the first CUDA query initialises the driver.
#pragma once

#include "runtime/device_pool.hpp"

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

// What would serve one model component on one device (stages/model/component_backends.hpp).
struct ComponentOnDevice {
  std::string component;  // "transformer"
  std::string device;     // "cpu:0"
  std::string backend;    // "aoti" (a compiled .pt2) or "torchscript"
  std::string file;       // the file's name in the package
  std::string refused;    // why the package's compiled file for the device type is not used ("" if none)
};

struct DeviceListing {
  std::string backend;              // e.g. "libtorch 2.11.0"; empty in a build without LibTorch
  std::vector<DeviceSpec> devices;  // in list order
  std::vector<ComponentOnDevice> components;  // per model asked for, every model component on every device
};

// Error(invalid_argument) for a list that does not resolve (parse_device_list's rules), or a
// model package that does not load. `models`: packages whose components' backends to list
// (read, not loaded: a compiled file that passes its checks may still fail to load later, and
// then falls back); none in a build without LibTorch.
// per_gpu: leases per CUDA device (config threads.per_gpu), shown as its max_concurrency.
DeviceListing list_devices(std::string_view list = "auto", const std::vector<std::filesystem::path>& models = {},
                           std::size_t per_gpu = 1);

}  // namespace vgen
