// `vgen devices [--devices LIST]`: shows how a device list resolves on this machine.
#include "apps/vgen/commands.hpp"
#include "runtime/device_pool.hpp"
#ifdef VGEN_WITH_TORCH
#include "stages/torch_devices.hpp"
#endif

#include <iostream>

namespace vgen::cli {

Run add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the devices a --devices list resolves to");
  auto list = std::make_shared<std::string>("auto");
  cmd->add_option("--devices", *list, "e.g. auto, cpu, cpu,cpu, cuda:0,cuda:1");
  return [list] {
    CudaDiscovery discover;
#ifdef VGEN_WITH_TORCH
    discover = discover_cuda_devices;
    std::cout << "libtorch " << torch_version() << "\n";
#endif
    for (const auto& d : parse_device_list(*list, discover)) {
      std::cout << d.id << "\tkind=" << (d.kind == DeviceKind::cuda ? "cuda" : "cpu")
                << "\tmemory=" << (d.memory_bytes ? std::to_string(d.memory_bytes >> 20) + "MiB" : "unlimited")
                << "\tmax_concurrency=" << d.max_concurrency << "\n";
    }
    return 0;
  };
}

}  // namespace vgen::cli
