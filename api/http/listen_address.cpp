#include "api/http/listen_address.hpp"

#include "runtime/errors.hpp"

#include <boost/asio/ip/address.hpp>

#include <charconv>
#include <system_error>

namespace vgen::http {

std::pair<std::string, std::uint16_t> parse_listen_address(const std::string& listen) {
  auto bad = [&](const std::string& why) -> std::pair<std::string, std::uint16_t> {
    throw_error(ErrorKind::invalid_argument, "listen address '" + listen + "': " + why);
  };
  std::string host, port;
  if (!listen.empty() && listen.front() == '[') {
    const auto close = listen.find(']');
    if (close == std::string::npos || close + 1 >= listen.size() || listen[close + 1] != ':')
      return bad("expected [IPV6]:PORT");
    host = listen.substr(1, close - 1);
    port = listen.substr(close + 2);
  } else {
    const auto colon = listen.rfind(':');
    if (colon == std::string::npos) return bad("expected HOST:PORT");
    host = listen.substr(0, colon);
    port = listen.substr(colon + 1);
    if (host.find(':') != std::string::npos) return bad("write an IPv6 host as [HOST]:PORT");
  }
  if (host.empty()) host = "127.0.0.1";
  unsigned value = 0;
  const auto [end, err] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || err != std::errc() || end != port.data() + port.size() || value > 65535)
    return bad("port must be a number from 0 to 65535");
  return {host, static_cast<std::uint16_t>(value)};
}

boost::asio::ip::tcp::endpoint listen_endpoint(const std::string& listen) {
  const auto [host, port] = parse_listen_address(listen);
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec)
    throw_error(ErrorKind::invalid_argument, "listen address '" + listen + "': '" + host + "' is not an IP address");
  return {address, port};
}

}  // namespace vgen::http
