// vgen: command-line entry point. Parses flags, runs one subcommand, and maps errors to exit
// codes in one place (vgen::exit_code_for): 0 ok, 2 bad input, 1 failure.
#include "apps/vgen/commands.hpp"
#include "runtime/errors.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>
#include <map>

int main(int argc, char** argv) {
  CLI::App app{"vgen: asynchronous text-to-video pipeline runtime"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("vgen ") + VGEN_VERSION);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  // Each subcommand registers itself; the map finds the runner of the one parsed.
  std::map<std::string, vgen::cli::Run> commands;
  commands["devices"] = vgen::cli::add_devices_command(app);
#ifdef VGEN_WITH_TORCH
  commands["demo"] = vgen::cli::add_demo_command(app);
  commands["render"] = vgen::cli::add_render_command(app);
  commands["extend"] = vgen::cli::add_extend_command(app);
  commands["batch"] = vgen::cli::add_batch_command(app);
  commands["serve"] = vgen::cli::add_serve_command(app);
#ifdef VGEN_WITH_NATS
  commands["worker"] = vgen::cli::add_worker_command(app);
#endif
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;  // bad input
  }
  // Logs go to stderr: stdout carries results (paths, --json objects).
  spdlog::set_default_logger(spdlog::stderr_color_mt("vgen"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  try {
    for (auto* sub : app.get_subcommands())
      if (auto it = commands.find(sub->get_name()); it != commands.end()) return it->second();
    return 2;
  } catch (...) {
    const auto error = std::current_exception();
    std::cerr << "vgen: error: " << vgen::describe(error) << "\n";
    return vgen::exit_code_for(vgen::classify(error));
  }
}
