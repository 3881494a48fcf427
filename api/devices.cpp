#include "api/devices.hpp"

#ifdef VGEN_WITH_TORCH
#include "stages/model/torch_devices.hpp"
#endif

namespace vgen {

DeviceListing list_devices(std::string_view list) {
  DeviceListing listing;
  CudaDiscovery discover;
#ifdef VGEN_WITH_TORCH
  discover = discover_cuda_devices;
  listing.backend = "libtorch " + torch_version();
#endif
  listing.devices = parse_device_list(list, discover);
  return listing;
}

}  // namespace vgen
