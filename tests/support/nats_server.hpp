// Test support: a private nats-server with JetStream on a free loopback port and a temporary
// store directory, started by the case and stopped (SIGTERM, then waited for) at its end.
//   if (!NatsServer::available()) { MESSAGE(NatsServer::skip_reason()); return; }
//   NatsServer broker;                      // broker.url() == "nats://127.0.0.1:<port>"
//   broker.stop(); broker.start();          // a restart on the same store directory and port
// Readiness is a TCP connect to the port, retried every 20 ms for at most 10 s.
#pragma once

#include "tests/support/temp_dir.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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

  NatsServer() : port_(free_port()) { start(); }
  ~NatsServer() { stop(); }
  NatsServer(const NatsServer&) = delete;
  NatsServer& operator=(const NatsServer&) = delete;

  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

  void start() {
    const auto port = std::to_string(port_), store = (dir_ / "store").string();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // a crashed test leaves no broker behind (holding its pipes)
      execlp("nats-server", "nats-server", "-js", "-a", "127.0.0.1", "-p", port.c_str(), "-sd", store.c_str(),
             "-l", (dir_ / "server.log").c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // bounds a hang: a loaded machine starts it slowly
    while (!accepting()) {
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
  static int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
  }

  bool accepting() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
  }

  TempDir dir_{"vgen-nats-"};
  int port_;
  pid_t pid_ = -1;
};

}  // namespace vgen::test
