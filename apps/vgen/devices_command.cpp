// `vgen devices [--devices LIST]`: shows how a device list resolves on this machine
// (api/devices.hpp).
#include "api/devices.hpp"
#include "apps/vgen/commands.hpp"

#include <iostream>

namespace vgen::cli {

Run add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the devices a --devices list resolves to");
  auto list = std::make_shared<std::string>("auto");
  auto models = std::make_shared<std::vector<std::filesystem::path>>();
  auto per_gpu = std::make_shared<std::size_t>(1);
  cmd->add_option("--devices", *list, "e.g. auto, cpu, cpu,cpu, cuda:0,cuda:1");
  cmd->add_option("--model", *models, "model package(s): also list which backend (aoti or torchscript) would serve each "
                                      "component on each device");
  cmd->add_option("--per-gpu", *per_gpu, "leases per CUDA device (config threads.per_gpu)")->check(CLI::Range(1, 8));
  return [list, models, per_gpu] {
    const auto listing = list_devices(*list, *models, *per_gpu);
    if (!listing.backend.empty()) std::cout << listing.backend << "\n";
    for (const auto& d : listing.devices) {
      std::cout << d.id << "\tkind=" << (d.kind == DeviceKind::cuda ? "cuda" : "cpu")
                << "\tmemory=" << (d.memory_bytes ? std::to_string(d.memory_bytes >> 20) + "MiB" : "unlimited")
                << "\tmax_concurrency=" << d.max_concurrency << "\n";
    }
    for (const auto& c : listing.components)
      std::cout << c.component << "\t" << c.device << "\tbackend=" << c.backend << "\tfile=" << c.file
                << (c.refused.empty() ? "" : "\trefused: " + c.refused) << "\n";
    return 0;
  };
}

}  // namespace vgen::cli
