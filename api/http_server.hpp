// HttpServer: a small HTTP/1.1 server (Boost.Beast) on an Asio executor, written with C++20
// coroutines. It knows nothing about vgen jobs: a RequestHandler turns a request into a
// Response, which is one of
//   - a buffered response (StringResponse),
//   - a file, or a byte range of one (FileResponse, built by file_response(), which answers
//     Range requests with 206 / 416),
//   - a stream (StreamResponse): the head is sent with chunked encoding, then the handler's
//     producer writes chunks over time (Server-Sent Events) until it returns or the client
//     goes away; the connection closes after a stream.
//
// Limits: header bytes (431), body bytes (413), a read timeout that also bounds idle
// keep-alive connections, a write timeout, and a maximum number of connections (further
// ones get 503 and are closed). It listens on loopback unless told otherwise.
//
// Threads: every connection runs on its own strand of the given executor, so the handler's
// coroutine for one connection never runs concurrently with itself; handle() for different
// connections may run concurrently on a multi-threaded executor. The handler must not block.
// File bodies are read with blocking file I/O on the io thread (small files; Beast's way).
// Thread-safety: listen(), start(), stop(), join() and local_endpoint() may be called from any
// thread; join() blocks and must not be called on an io thread of the executor (use
// async_join() there).
// Stop: stop() closes the acceptor, closes idle keep-alive connections, ends streams (their
// producers are cancelled), lets requests being handled finish and closes their connection
// after the response; after `shutdown_grace` every remaining connection is closed and its
// coroutine cancelled. join()/async_join() complete once the accept loop and every
// connection have ended.
// Ownership/lifetime: the server shares its state with its connections, so destroying the
// HttpServer object (which calls stop()) is safe while connections are still ending; the
// handler is kept alive until the last one has.
// Errors: an exception escaping handle() becomes the JSON error response of
// error_response(exception) (status from vgen::http_status_for); the connection survives.
#pragma once

#include "runtime/errors.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/file.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/basic_file_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace vgen::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

using Request = bhttp::request<bhttp::string_body>;
using StringResponse = bhttp::response<bhttp::string_body>;

// A byte range [offset, offset + length) of an open file, as a Beast File: basic_file_body
// serialises from the file's position for size() bytes, and Boost 1.81's file_body has no
// offset of its own. Read-only.
class FileRange {
 public:
  using native_handle_type = beast::file::native_handle_type;
  FileRange() = default;
  bool is_open() const { return file_.is_open(); }
  void close(beast::error_code& ec) { file_.close(ec); }
  void open(char const* path, beast::file_mode mode, beast::error_code& ec) { file_.open(path, mode, ec); }
  std::uint64_t file_size(beast::error_code& ec) const { return file_.size(ec); }
  // Restricts the file to [offset, offset + length) and seeks to offset.
  void set_range(std::uint64_t offset, std::uint64_t length, beast::error_code& ec);
  std::uint64_t size(beast::error_code& ec) const { ec = {}; return length_; }
  std::uint64_t pos(beast::error_code& ec) const;
  void seek(std::uint64_t offset, beast::error_code& ec) { file_.seek(offset_ + offset, ec); }
  std::size_t read(void* buffer, std::size_t n, beast::error_code& ec) { return file_.read(buffer, n, ec); }
  std::size_t write(void const*, std::size_t, beast::error_code& ec);  // always fails

 private:
  beast::file file_;
  std::uint64_t offset_ = 0, length_ = 0;
};
using FileBody = bhttp::basic_file_body<FileRange>;
using FileResponse = bhttp::response<FileBody>;

// Handed to a stream's producer. Lives as long as the producer runs.
class StreamWriter {
 public:
  explicit StreamWriter(beast::tcp_stream& stream, std::chrono::milliseconds write_timeout)
      : stream_(stream), write_timeout_(write_timeout) {}
  // Sends `data` as one chunk. Returns false (and sends nothing more) once the client has gone
  // or the write timed out; the producer should then return.
  asio::awaitable<bool> write(std::string_view data);
  bool ok() const noexcept { return ok_; }

 private:
  beast::tcp_stream& stream_;
  std::chrono::milliseconds write_timeout_;
  bool ok_ = true;
};

struct StreamResponse {
  bhttp::response<bhttp::empty_body> head;  // status and headers; chunked is set by the server
  // Runs on the connection's strand after the head was sent. It is cancelled (its pending
  // operation fails with operation_aborted) when the client disconnects or the server stops.
  std::function<asio::awaitable<void>(StreamWriter&)> produce;
};

using Response = std::variant<StringResponse, FileResponse, StreamResponse>;

// What a server serves. Implementations must be safe to call concurrently for different
// connections (see the threads note above).
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // The server sets version, keep-alive, Server and Content-Length; the handler sets the rest.
  virtual asio::awaitable<Response> handle(Request request) = 0;
};

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

class HttpServer {
 public:
  HttpServer(asio::any_io_executor executor, std::shared_ptr<RequestHandler> handler, ServerOptions options);
  ~HttpServer();  // stop(); does not wait
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens. Error(invalid_argument) for a malformed address, Error(transient)
  // naming the address when it cannot be bound. Returns the bound endpoint (real port).
  tcp::endpoint listen();
  // Starts accepting (calls listen() first if needed).
  void start();
  tcp::endpoint local_endpoint() const;
  void stop();
  void join();                        // blocks until stopped; not on an io thread
  asio::awaitable<void> async_join();  // the same, awaitable
  std::size_t connection_count() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Serves `raw` — the bytes a client sends on one connection, which then half-closes — with
// `handler` and returns the bytes the server writes back, without a socket. The same parser
// limits, 400/413/431 responses, handler-exception mapping, keep-alive handling and message
// finishing as a connection; no timeouts, and a stream's head only (its producer is not run).
// Each request's handler runs to completion on a private io_context (serve_bytes blocks
// meanwhile: a handler that waits forever blocks it forever). For tests and the fuzz harness
// (tests/fuzz).
std::string serve_bytes(RequestHandler& handler, const ServerOptions& options, std::string_view raw);

// Splits "HOST:PORT" / "[V6]:PORT" / ":PORT" (host defaults to 127.0.0.1). Error(invalid_argument).
std::pair<std::string, std::uint16_t> parse_listen_address(const std::string& listen);

// JSON error bodies, {"error": {"kind": ..., "message": ...}}, made in one place. A 429 or 503
// carries Retry-After.
StringResponse error_response(unsigned status, std::string_view kind, std::string_view message);
StringResponse error_response(ErrorKind kind, std::string_view message);  // status: http_status_for
StringResponse error_response(const std::exception_ptr& error);         // classify + describe
StringResponse json_response(unsigned status, std::string body);

// The file at `path` as a response to `request`: 200 with the whole file, or for one
// "Range: bytes=..." range 206 with Content-Range, 416 when unsatisfiable. A malformed or
// multi-range header is ignored (200, as RFC 9110 allows). Accept-Ranges: bytes is always set.
// Error(not_found) if the file cannot be opened.
Response file_response(const Request& request, const std::filesystem::path& path, std::string_view content_type);

// One Server-Sent Event: "event: NAME\ndata: LINE\n...\n\n" (each line of data prefixed).
std::string sse_event(std::string_view event, std::string_view data);

// A parsed single byte range: first and last byte, inclusive, clamped to the file. nullopt:
// ignore the header (malformed, another unit, several ranges); satisfiable == false: 416.
struct ByteRange { std::uint64_t first = 0, last = 0; bool satisfiable = true; };
std::optional<ByteRange> parse_range(std::string_view header, std::uint64_t size);

}  // namespace vgen::http
