#include "api/devices.hpp"

#ifdef VGEN_WITH_TORCH
#include "stages/model/component_backends.hpp"
#include "stages/model/model_package.hpp"
#include "stages/model/torch_devices.hpp"
#endif

namespace vgen {

DeviceListing list_devices(std::string_view list, const std::vector<std::filesystem::path>& models, std::size_t per_gpu) {
  DeviceListing listing;
  CudaDiscovery discover;
#ifdef VGEN_WITH_TORCH
  discover = discover_cuda_devices;
  listing.backend = "libtorch " + torch_version();
#endif
  listing.devices = parse_device_list(list, discover, 0.9, 1, per_gpu);
#ifdef VGEN_WITH_TORCH
  for (const auto& dir : models) {
    const auto package = load_model_package(dir);
    for (const auto& [name, c] : package.components) {
      if (c.format != "torchscript" && c.format != "aoti") continue;  // the tokenizer: no model backend
      for (const auto& d : listing.devices) {
        const auto plan = plan_component_backend(package, name, d.id);
        listing.components.push_back({name, d.id, plan.backend, plan.file.filename().string(), plan.refused});
      }
    }
  }
#else
  (void)models;
#endif
  return listing;
}

}  // namespace vgen
