// What an HTTP request handler gives back, and the builders for it. A Response is one of
//   - a buffered response (StringResponse): json_response(), error_response();
//   - a file, or a byte range of one (FileResponse, built by file_response(), which answers
//     Range requests with 206 / 416);
//   - a stream (StreamResponse): the server sends the head with chunked encoding, then the
//     producer writes chunks over time (Server-Sent Events, formatted by sse_event()).
// RequestHandler is the one interface a server serves (api/http/http_server, serve_bytes).
//
// Ownership: every response owns its body (FileResponse owns its open file). Thread-safety:
// the free functions are stateless and safe from any thread; a StreamWriter belongs to one
// connection's strand. Blocking: file_response() opens the file and reads its size (blocking
// file I/O, as Beast's file bodies do); everything else only builds values.
#pragma once

#include "runtime/errors.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/file.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/basic_file_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace vgen::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

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

// Handed to a stream's producer. Lives as long as the producer runs; used only on the
// connection's strand.
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
// connections; handle() must not block (it runs on an io thread).
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // The server sets version, keep-alive, Server and Content-Length; the handler sets the rest.
  virtual asio::awaitable<Response> handle(Request request) = 0;
};

// JSON error bodies, {"error": {"kind": ..., "message": ...}}, made in one place. A 429 or 503
// carries Retry-After.
StringResponse error_response(unsigned status, std::string_view kind, std::string_view message);
StringResponse error_response(ErrorKind kind, std::string_view message);  // status: http_status_for
StringResponse error_response(const std::exception_ptr& error);         // classify + describe
StringResponse json_response(unsigned status, std::string body);
StringResponse json_body(unsigned status, const boost::json::object& body);  // json_response of its text

// The file at `path` as a response to `request`: 200 with the whole file, or for one
// "Range: bytes=..." range 206 with Content-Range, 416 when unsatisfiable. A malformed or
// multi-range header is ignored (200, as RFC 9110 allows). Accept-Ranges: bytes is always set.
// Error(not_found) if the file cannot be opened.
Response file_response(const Request& request, const std::filesystem::path& path, std::string_view content_type);

// Whether the request's Content-Type is `type` (ASCII case-insensitive, parameters such as
// "; boundary=..." ignored). False when the header is absent.
bool has_content_type(const Request& request, std::string_view type);

// The query parameters of a request target, percent- and '+'-decoded: "a=1&b=x%20y" ->
// {a: "1", b: "x y"}; a key given twice keeps its last value.
std::map<std::string, std::string, std::less<>> parse_query(std::string_view target);

// One Server-Sent Event: "event: NAME\ndata: LINE\n...\n\n" (each line of data prefixed).
std::string sse_event(std::string_view event, std::string_view data);

// A parsed single byte range: first and last byte, inclusive, clamped to the file. nullopt:
// ignore the header (malformed, another unit, several ranges); satisfiable == false: 416.
struct ByteRange { std::uint64_t first = 0, last = 0; bool satisfiable = true; };
std::optional<ByteRange> parse_range(std::string_view header, std::uint64_t size);

}  // namespace vgen::http
