// One request/response exchange of HTTP/1.1 as vgen serves it, the same on HttpServer's socket
// connections (api/http/http_server) and in serve_bytes (no socket): the parser's header and body
// limits, the 400/413/431 answers to a request that cannot be read, "Expect: 100-continue",
// a handler's exception turned into its JSON error, and the fields the server sets on every
// response (version, keep-alive, Server, Content-Length; chunked for a stream's head).
//
// Thread-safety: stateless; safe from any thread. Blocking: only serve_bytes blocks (below).
#pragma once

#include "api/http/http_response.hpp"

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/parser.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace vgen::http {

// How a server serves. An exchange reads the limits and server_name; the rest is HttpServer's.
struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT, [IPv6]:PORT; port 0 picks a free port
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_body_bytes = 64 * 1024;
  std::chrono::milliseconds read_timeout{30'000};  // a whole request, and idle keep-alive
  std::chrono::milliseconds write_timeout{30'000};
  std::size_t max_connections = 256;
  std::chrono::milliseconds shutdown_grace{5'000};
  std::string server_name = "vgen";
};

using RequestParser = bhttp::request_parser<bhttp::string_body>;

// Sets the options' header and body limits on a parser for one request.
void apply_limits(RequestParser& parser, const ServerOptions& options);

// Whether the request whose head `parser` holds waits for "100 Continue" before its body.
bool expects_continue(const RequestParser& parser);

// The interim response to "Expect: 100-continue", as raw bytes (see http_server.cpp for why).
inline constexpr std::string_view continue_response = "HTTP/1.1 100 Continue\r\n\r\n";

// The response to a failed read: 413 (body limit), 431 (header limit) or 400 (malformed); the
// connection closes after it. nullopt for the errors that just end the connection (eof,
// a client that closed mid-request, timeout, reset, cancelled).
std::optional<StringResponse> read_error_response(const beast::error_code& ec, const ServerOptions& options);

// Awaits handler.handle(request); an exception escaping it becomes error_response(exception).
// Cancellation: the handler's own; the exception of a cancelled one becomes its error response
// like any other.
asio::awaitable<Response> handle_safely(RequestHandler& handler, Request request);

// Sets what the server owns on a buffered or file response: version, keep-alive, Server
// (unless the handler set one) and Content-Length.
template <class Body>
void finish_message(bhttp::response<Body>& m, unsigned version, bool keep_alive, const std::string& server) {
  m.version(version);
  m.keep_alive(keep_alive);
  if (m.find(bhttp::field::server) == m.end()) m.set(bhttp::field::server, server);
  m.prepare_payload();
}

// The same for a stream's head: chunked, and the connection closes after the stream.
void finish_stream_head(bhttp::response<bhttp::empty_body>& head, unsigned version, const std::string& server);

// Serves `raw` — the bytes a client sends on one connection, which then half-closes — with
// `handler` and returns the bytes the server writes back, without a socket. The same parser
// limits, 400/413/431 responses, handler-exception mapping, keep-alive handling and message
// finishing as a connection; no timeouts, and a stream's head only (its producer is not run).
// Each request's handler runs to completion on a private io_context (serve_bytes blocks
// meanwhile: a handler that waits forever blocks it forever). For tests and the fuzz harness
// (tests/fuzz).
std::string serve_bytes(RequestHandler& handler, const ServerOptions& options, std::string_view raw);

}  // namespace vgen::http
