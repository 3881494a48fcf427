#include "api/http_server.hpp"

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

TEST_CASE("parse_listen_address") {
  CHECK(http::parse_listen_address("127.0.0.1:8080") == std::pair<std::string, std::uint16_t>{"127.0.0.1", 8080});
  CHECK(http::parse_listen_address(":0").first == "127.0.0.1");
  CHECK(http::parse_listen_address("[::1]:9").first == "::1");
  CHECK_THROWS_WITH(http::parse_listen_address("localhost"), doctest::Contains("HOST:PORT"));
  CHECK_THROWS_WITH(http::parse_listen_address("1.2.3.4:99999"), doctest::Contains("port"));
  CHECK_THROWS_WITH(http::parse_listen_address("1.2.3.4:x"), doctest::Contains("port"));
}

TEST_CASE("parse_range") {
  auto r = http::parse_range("bytes=0-9", 100);
  REQUIRE(r);
  CHECK((r->first == 0 && r->last == 9 && r->satisfiable));
  r = http::parse_range("bytes=90-", 100);
  CHECK((r && r->first == 90 && r->last == 99));
  r = http::parse_range("bytes=-10", 100);
  CHECK((r && r->first == 90 && r->last == 99));
  r = http::parse_range("bytes=-1000", 100);
  CHECK((r && r->first == 0 && r->last == 99));
  r = http::parse_range("bytes=50-1000", 100);
  CHECK((r && r->last == 99));
  CHECK_FALSE(http::parse_range("bytes=100-", 100)->satisfiable);
  CHECK_FALSE(http::parse_range("bytes=-0", 100)->satisfiable);
  CHECK_FALSE(http::parse_range("bytes=9-3", 100));    // invalid: ignored
  CHECK_FALSE(http::parse_range("bytes=0-1,5-6", 100));  // several ranges: ignored
  CHECK_FALSE(http::parse_range("items=0-1", 100));
  CHECK_FALSE(http::parse_range("bytes=a-b", 100));
}

TEST_CASE("sse_event prefixes every data line") {
  CHECK(http::sse_event("progress", "{\"a\":1}") == "event: progress\ndata: {\"a\":1}\n\n");
  CHECK(http::sse_event("x", "a\nb") == "event: x\ndata: a\ndata: b\n\n");
}

TEST_CASE("error_response: JSON body, status from the one mapping, Retry-After on 429") {
  auto r = http::error_response(vgen::ErrorKind::overloaded, "queue full");
  CHECK(r.result_int() == 429);
  CHECK(r[bhttp::field::retry_after] == "1");
  CHECK(r.body() == R"({"error":{"kind":"overloaded","message":"queue full"}})");
  CHECK(http::error_response(vgen::ErrorKind::invalid_argument, "x").result_int() == 400);
}

TEST_CASE("requests on a keep-alive connection; handler errors become JSON") {
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

TEST_CASE("size limits: 413 for the body, 431 for the header, 400 for garbage") {
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

namespace {

// The responses in `bytes`, in order (a trailing incomplete one is left out).
std::vector<http::StringResponse> parse_responses(const std::string& bytes) {
  std::vector<http::StringResponse> out;
  beast::flat_buffer buffer;
  buffer.commit(asio::buffer_copy(buffer.prepare(bytes.size()), asio::buffer(bytes)));
  while (buffer.size() > 0) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.eager(true);
    beast::error_code ec;
    while (!parser.is_done() && buffer.size() > 0) {
      const auto n = parser.put(buffer.data(), ec);
      buffer.consume(n);
      if (ec || n == 0) break;
    }
    if (!parser.is_done()) break;
    out.push_back(parser.release());
  }
  return out;
}

}  // namespace

TEST_CASE("serve_bytes: a connection's requests without a socket, with the same limits and errors") {
  FakeHandler h;
  const auto o = small_options();
  // Pipelined requests on one connection; nothing is served after "Connection: close".
  auto out = http::serve_bytes(h, o,
                               "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                               "GET /throw HTTP/1.1\r\nHost: x\r\n\r\n"
                               "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                               "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  auto res = parse_responses(out);
  REQUIRE(res.size() == 3);
  CHECK(res[0].result_int() == 200);
  CHECK(res[0].body() == "echo:abc");
  CHECK(res[0].keep_alive());
  CHECK(res[0][bhttp::field::server] == "vgen");
  CHECK(res[1].result_int() == 404);
  CHECK(res[1].body() == R"({"error":{"kind":"not_found","message":"no such thing"}})");
  CHECK_FALSE(res[2].keep_alive());
  CHECK(h.handled == 3);

  res = parse_responses(http::serve_bytes(h, o, "POST /echo HTTP/1.1\r\nContent-Length: 5000\r\n\r\n"));
  REQUIRE(res.size() == 1);
  CHECK(res[0].result_int() == 413);
  CHECK_FALSE(res[0].keep_alive());
  res = parse_responses(http::serve_bytes(h, o, "GET / HTTP/1.1\r\nX-Big: " + std::string(4000, 'b') + "\r\n\r\n"));
  REQUIRE(res.size() == 1);
  CHECK(res[0].result_int() == 431);
  res = parse_responses(http::serve_bytes(h, o, "NOT A REQUEST\r\n\r\n"));
  REQUIRE(res.size() == 1);
  CHECK(res[0].result_int() == 400);
  // A client that closes before a whole request gets nothing, as on a socket.
  CHECK(http::serve_bytes(h, o, "").empty());
  CHECK(http::serve_bytes(h, o, "POST /echo HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc").empty());

  // The interim 100 Continue, then the response; a stream sends its chunked head only.
  res = parse_responses(http::serve_bytes(
      h, o, "POST /echo HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc"));
  REQUIRE(res.size() == 2);
  CHECK(res[0].result() == bhttp::status::continue_);
  CHECK(res[1].body() == "echo:abc");
  out = http::serve_bytes(h, o, "GET /stream HTTP/1.1\r\n\r\nGET /echo HTTP/1.1\r\n\r\n");
  CHECK(out.find("HTTP/1.1 200 OK\r\n") == 0);
  CHECK(out.find("Transfer-Encoding: chunked\r\n") != std::string::npos);
  CHECK(out.find("echo:") == std::string::npos);
  CHECK(h.producers_ended == 0);
}

TEST_CASE("Expect: 100-continue gets the interim response before the client sends the body") {
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

TEST_CASE("file responses: whole file, ranges, 416") {
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

TEST_CASE("a stream sends its events as chunks and ends the connection") {
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

TEST_CASE("a client that disconnects mid-stream cancels the producer") {
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

TEST_CASE("max_connections: the connection over the limit gets 503") {
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

TEST_CASE("an idle keep-alive connection is closed after the read timeout") {
  auto options = small_options();
  options.read_timeout = 200ms;
  with_server([](http::HttpServer& server, http::tcp::endpoint ep, FakeHandler&) -> asio::awaitable<void> {
    auto s = co_await connect(ep);
    CHECK((co_await roundtrip(s, get("/echo"))).result_int() == 200);
    CHECK(co_await closed_by_peer(s));  // no request within 200 ms
    while (server.connection_count() != 0) co_await sleep_for(5ms);
  }, options);
}

TEST_CASE("stop: idle and streaming connections end, a request in flight completes") {
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
    }, small_options(), threads);
  }
}

TEST_CASE("stop: the grace period cuts a handler that does not finish") {
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
