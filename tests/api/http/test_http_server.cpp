#include "api/http/http_server.hpp"

#include "runtime/event.hpp"
#include "tests/support/async_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace http = vgen::http;
using asio::use_awaitable;
using namespace std::chrono_literals;
using vgen::test::run_async;
using vgen::test::sleep_for;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// Serves a few fixed routes; counts the stream producers that have ended.
struct FakeHandler : http::RequestHandler {
  std::filesystem::path file;
  std::atomic<int> producers_ended{0};
  std::atomic<int> handled{0};
  vgen::AsyncEvent never;

  struct CountEnd {
    std::atomic<int>& n;
    ~CountEnd() { ++n; }
  };

  asio::awaitable<http::Response> handle(http::Request req) override {
    ++handled;
    const std::string target(req.target());
    if (target == "/echo") {
      http::StringResponse res{bhttp::status::ok, 11};
      res.set(bhttp::field::content_type, "text/plain");
      res.body() = "echo:" + req.body();
      co_return res;
    }
    if (target == "/throw") vgen::throw_error(vgen::ErrorKind::not_found, "no such thing");
    if (target == "/slow") {
      co_await sleep_for(200ms);
      co_return http::json_response(200, R"({"slow":true})");
    }
    if (target == "/hang") {
      co_await never.wait(use_awaitable);
      co_return http::json_response(200, "{}");
    }
    if (target == "/file") co_return http::file_response(req, file, "video/mp4");
    if (target == "/stream" || target == "/forever") {
      http::StreamResponse s;
      s.head.result(bhttp::status::ok);
      s.head.set(bhttp::field::content_type, "text/event-stream");
      if (target == "/stream") {
        s.produce = [this](http::StreamWriter& w) -> asio::awaitable<void> {
          CountEnd end{producers_ended};
          for (int i = 0; i < 3; ++i) {
            co_await sleep_for(5ms);
            if (!co_await w.write(http::sse_event("progress", "{\"step\":" + std::to_string(i) + "}"))) co_return;
          }
          co_await w.write(http::sse_event("done", "{}"));
        };
      } else {
        s.produce = [this](http::StreamWriter& w) -> asio::awaitable<void> {
          CountEnd end{producers_ended};
          co_await w.write(http::sse_event("progress", "{}"));
          co_await never.wait(use_awaitable);  // only cancellation ends this
        };
      }
      co_return s;
    }
    co_return http::error_response(404, "not_found", "no route");
  }
};

http::ServerOptions small_options() {
  http::ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.max_body_bytes = 1024;
  o.max_header_bytes = 2048;
  o.read_timeout = 5s;
  o.write_timeout = 5s;
  o.shutdown_grace = 2s;
  return o;
}

// A grace far above /slow's 200 ms: the request in flight must complete however slowly this
// loaded machine schedules it (2 s left ~1.8 s for that).
http::ServerOptions patient_options() {
  auto o = small_options();
  o.shutdown_grace = 60s;
  return o;
}

asio::awaitable<beast::tcp_stream> connect(const http::tcp::endpoint& ep) {
  beast::tcp_stream s(co_await asio::this_coro::executor);
  co_await s.async_connect(ep, use_awaitable);
  co_return s;
}

http::Request get(std::string target, bool keep_alive = true) {
  http::Request r{bhttp::verb::get, target, 11};
  r.set(bhttp::field::host, "localhost");
  r.keep_alive(keep_alive);
  return r;
}

asio::awaitable<http::StringResponse> roundtrip(beast::tcp_stream& s, http::Request req) {
  req.prepare_payload();
  co_await bhttp::async_write(s, req, use_awaitable);
  beast::flat_buffer buffer;
  http::StringResponse res;
  co_await bhttp::async_read(s, buffer, res, use_awaitable);
  co_return res;
}

// Sends raw bytes and reads one response.
asio::awaitable<http::StringResponse> raw_roundtrip(const http::tcp::endpoint& ep, std::string bytes) {
  auto s = co_await connect(ep);
  co_await asio::async_write(s, asio::buffer(bytes), use_awaitable);
  beast::flat_buffer buffer;
  http::StringResponse res;
  co_await bhttp::async_read(s, buffer, res, use_awaitable);
  co_return res;
}

// True once the peer has closed the connection (read sees EOF or reset).
asio::awaitable<bool> closed_by_peer(beast::tcp_stream& s) {
  std::array<char, 64> buf;
  auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), tuple_awaitable);
  co_return ec == asio::error::eof || ec == asio::error::connection_reset;
}

// Runs `body(server, endpoint, handler)` against a started server, then stops and joins it.
template <class Body>
void with_server(Body body, http::ServerOptions options = small_options(), int threads = 1,
                 std::shared_ptr<FakeHandler> handler = std::make_shared<FakeHandler>()) {
  run_async(
      [&](asio::io_context& io) -> asio::awaitable<void> {
        return [](asio::io_context& io, Body body, http::ServerOptions options,
                  std::shared_ptr<FakeHandler> handler) -> asio::awaitable<void> {
          http::HttpServer server(io.get_executor(), handler, options);
          const auto ep = server.listen();
          server.start();
          co_await body(server, ep, *handler);
          server.stop();
          co_await server.async_join();
        }(io, body, options, handler);
      },
      std::chrono::seconds(30), threads);
}

}  // namespace

TEST_CASE("listen: a host that is not an IP address is invalid_argument, a port in use transient") {
  asio::io_context io;
  auto handler = std::make_shared<FakeHandler>();
  auto options = small_options();
  options.listen = "example.com:0";
  http::HttpServer named(io.get_executor(), handler, options);
  try {
    named.listen();
    FAIL("listened on a name");
  } catch (const vgen::Error& e) {
    CHECK(e.kind() == vgen::ErrorKind::invalid_argument);
  }
  http::HttpServer first(io.get_executor(), handler, small_options());
  options.listen = "127.0.0.1:" + std::to_string(first.listen().port());
  CHECK(first.listen() == first.local_endpoint());  // listening twice keeps the endpoint
  http::HttpServer second(io.get_executor(), handler, options);
  try {
    second.listen();
    FAIL("two servers listened on one port");
  } catch (const vgen::Error& e) {
    CHECK(e.kind() == vgen::ErrorKind::transient);
    CHECK(std::string(e.what()).find("cannot listen on " + options.listen) != std::string::npos);
  }
}

TEST_CASE("requests on a keep-alive connection; handler errors become JSON" * doctest::timeout(60)) {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    with_server([](http::HttpServer& server, http::tcp::endpoint ep, FakeHandler&) -> asio::awaitable<void> {
      CHECK(ep.port() != 0);
      auto s = co_await connect(ep);
      auto req = get("/echo");
      req.method(bhttp::verb::post);
      req.body() = "abc";
      auto res = co_await roundtrip(s, req);
      CHECK(res.result_int() == 200);
      CHECK(res.body() == "echo:abc");
      CHECK(res.keep_alive());
      CHECK(res[bhttp::field::server] == "vgen");
      res = co_await roundtrip(s, get("/throw"));  // same connection
      CHECK(res.result_int() == 404);
      CHECK(res[bhttp::field::content_type] == "application/json");
      CHECK(res.body() == R"({"error":{"kind":"not_found","message":"no such thing"}})");
      CHECK(server.connection_count() == 1);
      res = co_await roundtrip(s, get("/echo", false));
      CHECK_FALSE(res.keep_alive());
      CHECK(co_await closed_by_peer(s));
    }, small_options(), threads);
  }
}

TEST_CASE("size limits: 413 for the body, 431 for the header, 400 for garbage" * doctest::timeout(60)) {
  with_server([](http::HttpServer&, http::tcp::endpoint ep, FakeHandler& h) -> asio::awaitable<void> {
    auto res = co_await raw_roundtrip(ep, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" +
                                              std::string(5000, 'a'));
    CHECK(res.result_int() == 413);
    CHECK(res.body().find("exceeds 1024 bytes") != std::string::npos);
    CHECK_FALSE(res.keep_alive());
    res = co_await raw_roundtrip(ep, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4000, 'b') + "\r\n\r\n");
    CHECK(res.result_int() == 431);
    res = co_await raw_roundtrip(ep, "NOT A REQUEST\r\n\r\n");
    CHECK(res.result_int() == 400);
    CHECK(h.handled == 0);
    // Exactly at the limit is fine.
    res = co_await raw_roundtrip(ep, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n" +
                                         std::string(1024, 'a'));
    CHECK(res.result_int() == 200);
  });
}

TEST_CASE("Expect: 100-continue gets the interim response before the client sends the body" * doctest::timeout(60)) {
  with_server([](http::HttpServer&, http::tcp::endpoint ep, FakeHandler&) -> asio::awaitable<void> {
    auto s = co_await connect(ep);
    const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n";
    co_await asio::async_write(s, asio::buffer(head), use_awaitable);
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::empty_body> interim;
    co_await bhttp::async_read(s, buffer, interim, use_awaitable);
    CHECK(interim.get().result() == bhttp::status::continue_);
    co_await asio::async_write(s, asio::buffer(std::string("abc")), use_awaitable);
    http::StringResponse res;
    co_await bhttp::async_read(s, buffer, res, use_awaitable);
    CHECK(res.result_int() == 200);
    CHECK(res.body() == "echo:abc");
  });
}

TEST_CASE("file responses: whole file, ranges, 416" * doctest::timeout(60)) {
  auto handler = std::make_shared<FakeHandler>();
  handler->file = std::filesystem::temp_directory_path() / ("vgen_http_file_" + std::to_string(::getpid()));
  std::string content;
  for (int i = 0; i < 100000; ++i) content.push_back(static_cast<char>('a' + i % 26));
  std::ofstream(handler->file, std::ios::binary) << content;
  with_server([&content](http::HttpServer&, http::tcp::endpoint ep, FakeHandler&) -> asio::awaitable<void> {
    auto s = co_await connect(ep);
    auto res = co_await roundtrip(s, get("/file"));
    CHECK(res.result_int() == 200);
    CHECK(res[bhttp::field::accept_ranges] == "bytes");
    CHECK(res[bhttp::field::content_type] == "video/mp4");
    CHECK(res.body() == content);
    auto req = get("/file");
    req.set(bhttp::field::range, "bytes=10-19");
    res = co_await roundtrip(s, req);
    CHECK(res.result_int() == 206);
    CHECK(res[bhttp::field::content_range] == "bytes 10-19/100000");
    CHECK(res.body() == content.substr(10, 10));
    req.set(bhttp::field::range, "bytes=-5");
    res = co_await roundtrip(s, req);
    CHECK(res.body() == content.substr(99995));
    req.set(bhttp::field::range, "bytes=100000-");
    res = co_await roundtrip(s, req);
    CHECK(res.result_int() == 416);
    CHECK(res[bhttp::field::content_range] == "bytes */100000");
    req.set(bhttp::field::range, "bytes=0-1,3-4");
    res = co_await roundtrip(s, req);
    CHECK(res.result_int() == 200);
    CHECK(res.body().size() == content.size());
  }, small_options(), 1, handler);
  handler->file.replace_extension(".missing");
  with_server([](http::HttpServer&, http::tcp::endpoint ep, FakeHandler&) -> asio::awaitable<void> {
    auto s = co_await connect(ep);
    auto res = co_await roundtrip(s, get("/file"));
    CHECK(res.result_int() == 404);
  }, small_options(), 1, handler);
  std::filesystem::remove(std::filesystem::path(handler->file).replace_extension());
}

TEST_CASE("a stream sends its events as chunks and ends the connection" * doctest::timeout(60)) {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    with_server([](http::HttpServer&, http::tcp::endpoint ep, FakeHandler& h) -> asio::awaitable<void> {
      auto s = co_await connect(ep);
      auto res = co_await roundtrip(s, get("/stream"));
      CHECK(res.result_int() == 200);
      CHECK(res.chunked());
      CHECK(res[bhttp::field::content_type] == "text/event-stream");
      CHECK(res.body() ==
            "event: progress\ndata: {\"step\":0}\n\nevent: progress\ndata: {\"step\":1}\n\n"
            "event: progress\ndata: {\"step\":2}\n\nevent: done\ndata: {}\n\n");
      CHECK(co_await closed_by_peer(s));
      CHECK(h.producers_ended == 1);
    }, small_options(), threads);
  }
}

TEST_CASE("a client that disconnects mid-stream cancels the producer" * doctest::timeout(60)) {
  with_server([](http::HttpServer& server, http::tcp::endpoint ep, FakeHandler& h) -> asio::awaitable<void> {
    auto s = co_await connect(ep);
    auto req = get("/forever");
    req.prepare_payload();
    co_await bhttp::async_write(s, req, use_awaitable);
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    co_await bhttp::async_read_header(s, buffer, parser, use_awaitable);
    CHECK(parser.get().result_int() == 200);
    s.socket().close();
    while (h.producers_ended == 0 || server.connection_count() != 0) co_await sleep_for(5ms);  // watchdog bounds this
    CHECK(h.producers_ended == 1);
  });
}

TEST_CASE("max_connections: the connection over the limit gets 503" * doctest::timeout(60)) {
  auto options = small_options();
  options.max_connections = 1;
  with_server([](http::HttpServer& server, http::tcp::endpoint ep, FakeHandler&) -> asio::awaitable<void> {
    auto first = co_await connect(ep);
    CHECK((co_await roundtrip(first, get("/echo"))).result_int() == 200);
    auto res = co_await raw_roundtrip(ep, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(res.result_int() == 503);
    CHECK(res[bhttp::field::retry_after] == "1");
    CHECK(server.connection_count() == 1);
  }, options);
}

TEST_CASE("an idle keep-alive connection is closed after the read timeout" * doctest::timeout(60)) {
  auto options = small_options();
  options.read_timeout = 200ms;
  with_server([](http::HttpServer& server, http::tcp::endpoint ep, FakeHandler&) -> asio::awaitable<void> {
    auto s = co_await connect(ep);
    CHECK((co_await roundtrip(s, get("/echo"))).result_int() == 200);
    CHECK(co_await closed_by_peer(s));  // no request within 200 ms
    while (server.connection_count() != 0) co_await sleep_for(5ms);
  }, options);
}

TEST_CASE("stop: idle and streaming connections end, a request in flight completes" * doctest::timeout(60)) {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    with_server([](http::HttpServer& server, http::tcp::endpoint ep, FakeHandler& h) -> asio::awaitable<void> {
      auto idle = co_await connect(ep);
      CHECK((co_await roundtrip(idle, get("/echo"))).result_int() == 200);
      auto streaming = co_await connect(ep);
      auto req = get("/forever");
      req.prepare_payload();
      co_await bhttp::async_write(streaming, req, use_awaitable);
      beast::flat_buffer buffer;
      bhttp::response_parser<bhttp::string_body> parser;
      co_await bhttp::async_read_header(streaming, buffer, parser, use_awaitable);
      auto busy = co_await connect(ep);
      auto slow = get("/slow");
      slow.prepare_payload();
      co_await bhttp::async_write(busy, slow, use_awaitable);
      while (h.handled < 3) co_await sleep_for(1ms);

      server.stop();
      http::StringResponse res;
      beast::flat_buffer b2;
      co_await bhttp::async_read(busy, b2, res, use_awaitable);
      CHECK(res.result_int() == 200);
      CHECK_FALSE(res.keep_alive());  // closes after the response
      CHECK(co_await closed_by_peer(idle));
      co_await server.async_join();
      CHECK(h.producers_ended == 1);
      CHECK(server.connection_count() == 0);
      // New connections are refused once stopped.
      beast::tcp_stream late(co_await asio::this_coro::executor);
      auto [ec] = co_await late.async_connect(ep, tuple_awaitable);
      CHECK(ec);
    }, patient_options(), threads);
  }
}

TEST_CASE("stop: the grace period cuts a handler that does not finish" * doctest::timeout(60)) {
  auto options = small_options();
  options.shutdown_grace = 50ms;
  auto handler = std::make_shared<FakeHandler>();
  with_server([](http::HttpServer& server, http::tcp::endpoint ep, FakeHandler& h) -> asio::awaitable<void> {
    auto s = co_await connect(ep);
    auto hang = get("/hang");  // never answers by itself
    hang.prepare_payload();
    co_await bhttp::async_write(s, hang, use_awaitable);
    while (h.handled < 1) co_await sleep_for(1ms);
    server.stop();
    co_await server.async_join();  // the watchdog fails the case if this never completes
    CHECK(co_await closed_by_peer(s));
  }, options, 1, handler);
}
