// The address an HTTP server listens on, from its text form: "HOST:PORT", "[IPV6]:PORT" or
// ":PORT" (host 127.0.0.1). Port 0 asks the system for a free port. Stateless and
// thread-safe; nothing here blocks (no name resolution: "localhost" is the only name known).
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace vgen::http {

// Splits "HOST:PORT" / "[V6]:PORT" / ":PORT" (host defaults to 127.0.0.1). Error(invalid_argument).
std::pair<std::string, std::uint16_t> parse_listen_address(const std::string& listen);

// The endpoint to bind for `listen`: parse_listen_address, then the host as an IP address
// ("localhost" is 127.0.0.1). Error(invalid_argument) naming `listen` when the host is not one.
boost::asio::ip::tcp::endpoint listen_endpoint(const std::string& listen);

}  // namespace vgen::http
