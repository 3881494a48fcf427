#include "api/http/listen_address.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <optional>

namespace http = vgen::http;

namespace {

// The ErrorKind that `f` throws, or nullopt when it returns.
template <class F>
std::optional<vgen::ErrorKind> error_kind_of(F f) {
  try {
    f();
  } catch (const vgen::Error& e) {
    return e.kind();
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("parse_listen_address") {
  CHECK(http::parse_listen_address("127.0.0.1:8080") == std::pair<std::string, std::uint16_t>{"127.0.0.1", 8080});
  CHECK(http::parse_listen_address(":0").first == "127.0.0.1");
  CHECK(http::parse_listen_address("[::1]:9").first == "::1");
  CHECK(http::parse_listen_address("0.0.0.0:65535").second == 65535);
  CHECK_THROWS_WITH(http::parse_listen_address("localhost"), doctest::Contains("HOST:PORT"));
  CHECK_THROWS_WITH(http::parse_listen_address("1.2.3.4:99999"), doctest::Contains("port"));
  CHECK_THROWS_WITH(http::parse_listen_address("1.2.3.4:x"), doctest::Contains("port"));
  CHECK_THROWS_WITH(http::parse_listen_address("1.2.3.4:"), doctest::Contains("port"));
  CHECK_THROWS_WITH(http::parse_listen_address("::1:80"), doctest::Contains("[HOST]:PORT"));
  CHECK_THROWS_WITH(http::parse_listen_address("[::1]"), doctest::Contains("[IPV6]:PORT"));
  CHECK_THROWS_WITH(http::parse_listen_address("[::1]80"), doctest::Contains("[IPV6]:PORT"));
  CHECK(error_kind_of([] { http::parse_listen_address("nope"); }) == vgen::ErrorKind::invalid_argument);
}

TEST_CASE("listen_endpoint: IP addresses only, localhost as loopback") {
  auto ep = http::listen_endpoint("127.0.0.1:8080");
  CHECK(ep.address().to_string() == "127.0.0.1");
  CHECK(ep.port() == 8080);
  CHECK(http::listen_endpoint(":0").address().to_string() == "127.0.0.1");
  CHECK(http::listen_endpoint("localhost:9").address().to_string() == "127.0.0.1");
  ep = http::listen_endpoint("[::1]:9");
  CHECK(ep.address().is_v6());
  CHECK(ep.address().is_loopback());
  CHECK(http::listen_endpoint("0.0.0.0:1").address().is_unspecified());
  CHECK_THROWS_WITH(http::listen_endpoint("example.com:80"), doctest::Contains("'example.com' is not an IP address"));
  CHECK(error_kind_of([] { http::listen_endpoint("example.com:80"); }) == vgen::ErrorKind::invalid_argument);
  CHECK(error_kind_of([] { http::listen_endpoint("[nope]:80"); }) == vgen::ErrorKind::invalid_argument);
}
