#include "api/http/http_exchange.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <optional>
#include <variant>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace http = vgen::http;

namespace {

// /echo answers with the body; /throw throws not_found; /stream answers with a stream whose
// producer counts its runs; anything else is 404.
struct FakeHandler : http::RequestHandler {
  std::atomic<int> handled{0};
  std::atomic<int> producers_run{0};

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
    if (target == "/stream") {
      http::StreamResponse s;
      s.head.result(bhttp::status::ok);
      s.head.set(bhttp::field::content_type, "text/event-stream");
      s.produce = [this](http::StreamWriter&) -> asio::awaitable<void> {
        ++producers_run;
        co_return;
      };
      co_return s;
    }
    co_return http::error_response(404, "not_found", "no route");
  }
};

http::ServerOptions small_options() {
  http::ServerOptions o;
  o.max_body_bytes = 1024;
  o.max_header_bytes = 2048;
  return o;
}

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

// handle_safely's response to `target`, run to completion on a private io_context.
http::Response handled_safely(http::RequestHandler& handler, std::string target) {
  asio::io_context io;
  std::optional<http::Response> out;
  asio::co_spawn(io, http::handle_safely(handler, http::Request{bhttp::verb::get, target, 11}),
                 [&](std::exception_ptr e, http::Response r) {
                   REQUIRE_FALSE(e);
                   out = std::move(r);
                 });
  io.run();
  REQUIRE(out);
  return std::move(*out);
}

}  // namespace

TEST_CASE("read_error_response: 413, 431 and 400 answer; a client that went away gets nothing") {
  const auto o = small_options();
  auto res = http::read_error_response(bhttp::error::body_limit, o);
  REQUIRE(res);
  CHECK(res->result_int() == 413);
  CHECK(res->body().find("exceeds 1024 bytes") != std::string::npos);
  res = http::read_error_response(bhttp::error::header_limit, o);
  REQUIRE(res);
  CHECK(res->result_int() == 431);
  CHECK(res->body().find("exceeds 2048 bytes") != std::string::npos);
  res = http::read_error_response(bhttp::error::bad_method, o);
  REQUIRE(res);
  CHECK(res->result_int() == 400);
  CHECK_FALSE(http::read_error_response(bhttp::error::end_of_stream, o));
  CHECK_FALSE(http::read_error_response(bhttp::error::partial_message, o));
  CHECK_FALSE(http::read_error_response(asio::error::operation_aborted, o));
  CHECK_FALSE(http::read_error_response(beast::error::timeout, o));
  CHECK_FALSE(http::read_error_response(asio::error::connection_reset, o));
}

TEST_CASE("finish_message and finish_stream_head set what the server owns") {
  http::StringResponse res{bhttp::status::ok, 11};
  res.body() = "abc";
  http::finish_message(res, 10, true, "vgen");
  CHECK(res.version() == 10);
  CHECK(res.keep_alive());
  CHECK(res[bhttp::field::server] == "vgen");
  CHECK(res[bhttp::field::content_length] == "3");
  res.set(bhttp::field::server, "handler");
  http::finish_message(res, 11, false, "vgen");
  CHECK(res[bhttp::field::server] == "handler");  // the handler's own is kept
  CHECK_FALSE(res.keep_alive());

  bhttp::response<bhttp::empty_body> head{bhttp::status::ok, 11};
  http::finish_stream_head(head, 11, "vgen");
  CHECK(head.chunked());
  CHECK_FALSE(head.keep_alive());
  CHECK(head[bhttp::field::server] == "vgen");
}

TEST_CASE("handle_safely: the handler's response, or its exception as the JSON error") {
  FakeHandler h;
  auto res = handled_safely(h, "/echo");
  CHECK(std::get<http::StringResponse>(res).body() == "echo:");
  res = handled_safely(h, "/throw");
  const auto& error = std::get<http::StringResponse>(res);
  CHECK(error.result_int() == 404);
  CHECK(error.body() == R"({"error":{"kind":"not_found","message":"no such thing"}})");
  CHECK(h.handled == 2);
}

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
  CHECK(h.producers_run == 0);
}
