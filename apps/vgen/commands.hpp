// Subcommands of the vgen executable. Each registers its flags on the CLI11 app and returns
// the function that runs it; the function returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace vgen::cli {

using Run = std::function<int()>;

Run add_demo_command(CLI::App& app);    // needs VGEN_WITH_TORCH
Run add_devices_command(CLI::App& app);
Run add_render_command(CLI::App& app);  // needs VGEN_WITH_TORCH
Run add_extend_command(CLI::App& app);  // needs VGEN_WITH_TORCH (render_command.cpp: the same job)
Run add_batch_command(CLI::App& app);   // needs VGEN_WITH_TORCH
Run add_serve_command(CLI::App& app);   // needs VGEN_WITH_TORCH
Run add_worker_command(CLI::App& app);  // needs VGEN_WITH_TORCH and libnats (VGEN_WITH_NATS)

}  // namespace vgen::cli
