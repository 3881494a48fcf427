// Test support: a private nats-server with JetStream on a loopback port it picks itself and a
// temporary store directory, started by the case and stopped (SIGTERM, then waited for) at its end.
//   if (!NatsServer::available()) { MESSAGE(NatsServer::skip_reason()); return; }
//   NatsServer broker;                      // broker.url() == "nats://127.0.0.1:<port>"
//   broker.stop(); broker.start();          // a restart on the same store directory and port
// Readiness is this process's ports file (--ports_file_dir, written once it listens), polled
// every 20 ms for at most 60 s: a probe of a port chosen here would also accept another test's
// broker that took it first. A server that exits on start (its port taken at a restart) throws.
#pragma once

#include "tests/support/temp_dir.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

namespace vgen::test {

class NatsServer {
 public:
  static bool available() { return std::system("command -v nats-server >/dev/null 2>&1") == 0; }
  static const char* skip_reason() {
    return "SKIPPED: nats-server is not installed (apt-get install nats-server): the fleet tests need a broker";
  }

  NatsServer() { start(); }
  ~NatsServer() { stop(); }
  NatsServer(const NatsServer&) = delete;
  NatsServer& operator=(const NatsServer&) = delete;

  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

  void start() {
    const auto port = std::to_string(port_), store = (dir_ / "store").string();
    const auto ports_dir = dir_ / ("ports-" + std::to_string(++starts_));
    std::filesystem::create_directories(ports_dir);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // a crashed test leaves no broker behind (holding its pipes)
      execlp("nats-server", "nats-server", "-js", "-a", "127.0.0.1", "-p", port.c_str(), "-sd", store.c_str(),
             "-l", (dir_ / "server.log").c_str(), "--ports_file_dir", ports_dir.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto ports_file = ports_dir / ("nats-server_" + std::to_string(pid_) + ".ports");
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // bounds a hang: a loaded machine starts it slowly
    while (true) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("nats-server exited on start (port " + port + "); see " + (dir_ / "server.log").string());
      }
      if (const int listening = port_of(ports_file); listening > 0) {
        port_ = listening;
        return;
      }
      if (std::chrono::steady_clock::now() > until) throw std::runtime_error("nats-server did not start on " + port);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  // The port in a ports file ({"nats":["nats://127.0.0.1:PORT"]}); 0 while it is absent or partly written.
  static int port_of(const std::filesystem::path& file) {
    std::ifstream in(file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = text.find("\"]");
    const auto colon = text.rfind(':', close);
    if (close == std::string::npos || colon == std::string::npos) return 0;
    try {
      return std::stoi(text.substr(colon + 1, close - colon - 1));
    } catch (const std::exception&) {
      return 0;
    }
  }

  TempDir dir_{"vgen-nats-"};
  int port_ = -1;  // nats-server picks it on the first start; restarts keep it
  int starts_ = 0;
  pid_t pid_ = -1;
};

}  // namespace vgen::test
