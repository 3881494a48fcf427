#include "api/http/http_exchange.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/write.hpp>

#include <variant>

namespace vgen::http {

namespace {

// Beast's parse errors, as opposed to the ones that mean the client went away.
bool is_parse_error(const beast::error_code& ec) {
  return &ec.category() == &bhttp::make_error_code(bhttp::error::bad_method).category() &&
         ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}

// A SyncWriteStream that appends to a string.
struct StringSink {
  std::string& out;
  template <class Buffers>
  std::size_t write_some(const Buffers& buffers) {
    beast::error_code ec;
    return write_some(buffers, ec);
  }
  template <class Buffers>
  std::size_t write_some(const Buffers& buffers, beast::error_code& ec) {
    ec = {};
    std::size_t n = 0;
    for (const auto b : beast::buffers_range_ref(buffers)) {
      out.append(static_cast<const char*>(b.data()), b.size());
      n += b.size();
    }
    return n;
  }
};

// Feeds the parser from `buffer` as Beast's read_header (whole == false) or read does: when
// the parser needs more than the buffer holds, the client has closed its side.
beast::error_code parse_from(beast::flat_buffer& buffer, RequestParser& parser, bool whole) {
  beast::error_code ec;
  parser.eager(whole);
  while (!(whole ? parser.is_done() : parser.is_header_done())) {
    const auto n = buffer.size() == 0 ? 0 : parser.put(buffer.data(), ec);
    buffer.consume(n);
    if (ec && ec != bhttp::error::need_more) return ec;
    if (n > 0 && !ec) continue;
    ec = {};
    if (!parser.got_some()) return bhttp::error::end_of_stream;
    parser.put_eof(ec);
    return ec;
  }
  return ec;
}

}  // namespace

void apply_limits(RequestParser& parser, const ServerOptions& options) {
  parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
  parser.body_limit(options.max_body_bytes);
}

bool expects_continue(const RequestParser& parser) {
  return beast::iequals(parser.get()[bhttp::field::expect], "100-continue");
}

std::optional<StringResponse> read_error_response(const beast::error_code& ec, const ServerOptions& options) {
  if (ec == bhttp::error::body_limit)
    return error_response(413, "invalid_argument",
                          "request body exceeds " + std::to_string(options.max_body_bytes) + " bytes");
  if (ec == bhttp::error::header_limit)
    return error_response(431, "invalid_argument",
                          "request header exceeds " + std::to_string(options.max_header_bytes) + " bytes");
  if (is_parse_error(ec)) return error_response(400, "invalid_argument", "malformed HTTP request: " + ec.message());
  return std::nullopt;
}

asio::awaitable<Response> handle_safely(RequestHandler& handler, Request request) {
  try {
    co_return co_await handler.handle(std::move(request));
  } catch (...) {
    co_return error_response(std::current_exception());
  }
}

void finish_stream_head(bhttp::response<bhttp::empty_body>& head, unsigned version, const std::string& server) {
  head.version(version);
  head.keep_alive(false);
  head.chunked(true);
  if (head.find(bhttp::field::server) == head.end()) head.set(bhttp::field::server, server);
}

std::string serve_bytes(RequestHandler& handler, const ServerOptions& options, std::string_view raw) {
  std::string out;
  StringSink sink{out};
  beast::flat_buffer buffer;
  buffer.commit(asio::buffer_copy(buffer.prepare(raw.size()), asio::buffer(raw.data(), raw.size())));
  asio::io_context io;
  for (;;) {
    RequestParser parser;
    apply_limits(parser, options);
    auto ec = parse_from(buffer, parser, false);
    if (!ec && !parser.is_done()) {
      if (expects_continue(parser)) out += continue_response;
      ec = parse_from(buffer, parser, true);
    }
    if (ec) {
      if (auto res = read_error_response(ec, options)) {
        finish_message(*res, 11, false, options.server_name);
        bhttp::write(sink, *res, ec);
      }
      break;
    }

    Request request = parser.release();
    const unsigned version = request.version();
    const bool keep_alive = request.keep_alive();
    std::optional<Response> response;
    asio::co_spawn(io, handle_safely(handler, std::move(request)), [&](std::exception_ptr e, Response r) {
      response = e ? Response(error_response(e)) : std::move(r);
    });
    io.restart();
    io.run();
    if (!response) break;  // the handler left no work behind and never completed
    if (auto* s = std::get_if<StreamResponse>(&*response)) {  // the head only, as a connection sends it
      finish_stream_head(s->head, version, options.server_name);
      bhttp::response_serializer<bhttp::empty_body> serializer(s->head);
      bhttp::write_header(sink, serializer, ec);
      break;
    }
    if (auto* s = std::get_if<StringResponse>(&*response)) {
      finish_message(*s, version, keep_alive, options.server_name);
      bhttp::write(sink, *s, ec);
    } else if (auto* f = std::get_if<FileResponse>(&*response)) {
      finish_message(*f, version, keep_alive, options.server_name);
      bhttp::write(sink, *f, ec);
    }
    if (ec || !keep_alive) break;
  }
  return out;
}

}  // namespace vgen::http
