// The devices a --devices list resolves to on this machine (`vgen devices`), with the CUDA
// discovery of the build: LibTorch's in a build with it (stages/model/torch_devices.hpp), none in a
// build without (then "cuda" entries fail as on a machine without a GPU).
// Thread-safety: safe from any thread. Blocking: the first CUDA query initialises the driver.
#pragma once

#include "runtime/device_pool.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace vgen {

struct DeviceListing {
  std::string backend;              // e.g. "libtorch 2.11.0"; empty in a build without LibTorch
  std::vector<DeviceSpec> devices;  // in list order
};

// Error(invalid_argument) for a list that does not resolve (parse_device_list's rules).
DeviceListing list_devices(std::string_view list = "auto");

}  // namespace vgen
