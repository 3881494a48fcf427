#include "api/http_server.hpp"

#include "runtime/event.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <charconv>
#include <map>
#include <mutex>

namespace vgen::http {

namespace {

using asio::use_awaitable;
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

enum class Phase { busy, reading, streaming };

struct Connection {
  Connection(tcp::socket socket, asio::any_io_executor s) : strand(std::move(s)), stream(std::move(socket)) {}
  asio::any_io_executor strand;
  beast::tcp_stream stream;  // touched only on `strand`
  Phase phase = Phase::busy;
  asio::cancellation_signal cancel;
};

bool is_parse_error(const beast::error_code& ec) {
  return &ec.category() == &bhttp::make_error_code(bhttp::error::bad_method).category() &&
         ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}

template <class Message>
void finish_message(Message& m, unsigned version, bool keep_alive, const std::string& server) {
  m.version(version);
  m.keep_alive(keep_alive);
  if (m.find(bhttp::field::server) == m.end()) m.set(bhttp::field::server, server);
  m.prepare_payload();
}

using RequestParser = bhttp::request_parser<bhttp::string_body>;

void apply_limits(RequestParser& parser, const ServerOptions& options) {
  parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
  parser.body_limit(options.max_body_bytes);
}

// The response to a failed read: 413, 431 or 400; nullopt for the errors that just end the
// connection (eof, timeout, reset, cancelled).
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

// An exception escaping the handler becomes its JSON error response.
asio::awaitable<Response> handle_safely(RequestHandler& handler, Request request) {
  try {
    co_return co_await handler.handle(std::move(request));
  } catch (...) {
    co_return error_response(std::current_exception());
  }
}

constexpr std::string_view continue_response = "HTTP/1.1 100 Continue\r\n\r\n";

// Half-close, then read and discard what the client still sends for a moment: closing with
// unread input makes the kernel send RST, and the client may lose our error response.
asio::awaitable<void> close_after_error(beast::tcp_stream& stream) {
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.expires_after(std::chrono::seconds(1));
  std::array<char, 4096> sink;
  std::size_t total = 0;
  while (!ec && total < (std::size_t{1} << 20)) {
    auto [e, n] = co_await stream.async_read_some(asio::buffer(sink), tuple_awaitable);
    ec = e;
    total += n;
  }
  stream.socket().close(ec);
}

}  // namespace

// ---- FileRange -------------------------------------------------------------------------

void FileRange::set_range(std::uint64_t offset, std::uint64_t length, beast::error_code& ec) {
  offset_ = offset;
  length_ = length;
  file_.seek(offset, ec);
}

std::uint64_t FileRange::pos(beast::error_code& ec) const {
  const auto p = file_.pos(ec);
  return p >= offset_ ? p - offset_ : 0;
}

std::size_t FileRange::write(void const*, std::size_t, beast::error_code& ec) {
  ec = std::make_error_code(std::errc::bad_file_descriptor);
  return 0;
}

// ---- StreamWriter ----------------------------------------------------------------------

asio::awaitable<bool> StreamWriter::write(std::string_view data) {
  if (!ok_ || data.empty()) co_return ok_;
  stream_.expires_after(write_timeout_);
  auto [ec, n] = co_await asio::async_write(stream_, bhttp::make_chunk(asio::buffer(data.data(), data.size())),
                                            tuple_awaitable);
  if (ec) ok_ = false;
  co_return ok_;
}

// ---- server state ----------------------------------------------------------------------

struct HttpServer::State : std::enable_shared_from_this<State> {
  State(asio::any_io_executor ex, std::shared_ptr<RequestHandler> h, ServerOptions o)
      : executor(std::move(ex)), handler(std::move(h)), options(std::move(o)),
        accept_strand(asio::make_strand(executor)), acceptor(accept_strand), grace_timer(accept_strand) {}

  asio::any_io_executor executor;
  std::shared_ptr<RequestHandler> handler;
  const ServerOptions options;
  asio::any_io_executor accept_strand;
  tcp::acceptor acceptor;         // on accept_strand (after listen())
  asio::steady_timer grace_timer;  // on accept_strand
  std::atomic<bool> stopping{false};
  AsyncEvent stopped;

  mutable std::mutex mutex;
  bool listening = false, accepting = false;
  tcp::endpoint endpoint;
  std::map<std::uint64_t, std::shared_ptr<Connection>> connections;
  std::uint64_t next_id = 0;

  asio::awaitable<void> accept_loop();
  void admit(tcp::socket socket, asio::any_io_executor strand);
  asio::awaitable<void> reject(tcp::socket socket);
  asio::awaitable<void> serve(std::shared_ptr<Connection> c);
  asio::awaitable<Response> call_handler(Request request);
  asio::awaitable<void> run_stream(Connection& c, StreamResponse& s, unsigned version);
  void remove(std::uint64_t id);
  void maybe_finished();
  void force_close_all();
};

asio::awaitable<void> HttpServer::State::accept_loop() {
  for (;;) {
    asio::any_io_executor strand = asio::make_strand(executor);
    auto [ec, socket] = co_await acceptor.async_accept(strand, tuple_awaitable);
    if (stopping || ec == asio::error::operation_aborted || !acceptor.is_open()) break;
    if (ec) {  // e.g. out of file descriptors: back off instead of spinning
      spdlog::warn("http: accept failed: {}", ec.message());
      asio::steady_timer pause(accept_strand, std::chrono::milliseconds(100));
      co_await pause.async_wait(tuple_awaitable);
      continue;
    }
    admit(std::move(socket), strand);
  }
}

void HttpServer::State::admit(tcp::socket socket, asio::any_io_executor strand) {
  std::unique_lock lock(mutex);
  if (stopping) return;  // the socket closes as it goes out of scope
  if (connections.size() >= options.max_connections) {
    lock.unlock();
    asio::co_spawn(strand, reject(std::move(socket)), asio::detached);
    return;
  }
  const auto id = next_id++;
  auto c = std::make_shared<Connection>(std::move(socket), strand);
  connections.emplace(id, c);
  lock.unlock();
  auto done = [self = shared_from_this(), id](std::exception_ptr e) {
    if (e) spdlog::warn("http: connection ended with an error: {}", describe(e));
    self->remove(id);
  };
  asio::co_spawn(strand, serve(c), asio::bind_cancellation_slot(c->cancel.slot(), std::move(done)));
}

// Over max_connections: answer 503 without reading the request, then close.
asio::awaitable<void> HttpServer::State::reject(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  auto res = error_response(503, "overloaded", "too many connections");
  finish_message(res, 11, false, options.server_name);
  stream.expires_after(options.write_timeout);
  co_await bhttp::async_write(stream, res, tuple_awaitable);
  co_await close_after_error(stream);
}

asio::awaitable<Response> HttpServer::State::call_handler(Request request) {
  co_return co_await handle_safely(*handler, std::move(request));
}

asio::awaitable<void> HttpServer::State::serve(std::shared_ptr<Connection> c) {
  // After the grace period's cancellation, operations fail one by one instead of throwing.
  co_await asio::this_coro::throw_if_cancelled(false);
  beast::flat_buffer buffer;
  for (;;) {
    // stop() sets `stopping` before it posts its cancel to this strand, so checking here and
    // then marking the phase cannot miss it.
    if (stopping) break;
    c->phase = Phase::reading;
    RequestParser parser;
    apply_limits(parser, options);
    c->stream.expires_after(options.read_timeout);  // one deadline for header and body
    auto [ec, n] = co_await bhttp::async_read_header(c->stream, buffer, parser, tuple_awaitable);
    if (!ec && !parser.is_done()) {
      // curl sends "Expect: 100-continue" for larger bodies and waits a second for it. Written
      // raw: under ThreadSanitizer, Beast's serializer writing this header-only message left
      // the following body read failing with operation_aborted (not seen without TSan).
      if (beast::iequals(parser.get()[bhttp::field::expect], "100-continue")) {
        std::tie(ec, std::ignore) =
            co_await asio::async_write(c->stream, asio::buffer(continue_response), tuple_awaitable);
      }
      if (!ec) std::tie(ec, std::ignore) = co_await bhttp::async_read(c->stream, buffer, parser, tuple_awaitable);
    }
    c->phase = Phase::busy;
    if (ec) {
      auto res = read_error_response(ec, options);
      if (res) {
        finish_message(*res, 11, false, options.server_name);
        c->stream.expires_after(options.write_timeout);
        co_await bhttp::async_write(c->stream, *res, tuple_awaitable);
        co_await close_after_error(c->stream);
      }
      break;  // eof, timeout, reset, cancelled by stop()
    }

    Request request = parser.release();
    const auto started = std::chrono::steady_clock::now();
    const std::string method(request.method_string()), target(request.target());
    const unsigned version = request.version();
    const bool client_keep_alive = request.keep_alive();
    Response response = co_await call_handler(std::move(request));
    const bool keep_alive = client_keep_alive && !stopping;

    beast::error_code write_ec;
    unsigned status = 0;
    if (auto* s = std::get_if<StreamResponse>(&response)) {
      status = s->head.result_int();
      spdlog::info("http: {} {} {} (stream)", method, target, status);
      co_await run_stream(*c, *s, version);
      break;  // a stream ends its connection
    }
    if (auto* s = std::get_if<StringResponse>(&response)) {
      finish_message(*s, version, keep_alive, options.server_name);
      status = s->result_int();
      c->stream.expires_after(options.write_timeout);
      std::tie(write_ec, std::ignore) = co_await bhttp::async_write(c->stream, *s, tuple_awaitable);
    } else if (auto* f = std::get_if<FileResponse>(&response)) {
      finish_message(*f, version, keep_alive, options.server_name);
      status = f->result_int();
      c->stream.expires_after(options.write_timeout);
      std::tie(write_ec, std::ignore) = co_await bhttp::async_write(c->stream, *f, tuple_awaitable);
    }
    const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    spdlog::info("http: {} {} {} {:.1f}ms", method, target, status, ms);
    if (write_ec || !keep_alive) break;
  }
  beast::error_code ignored;
  c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  c->stream.socket().close(ignored);
}

asio::awaitable<void> HttpServer::State::run_stream(Connection& c, StreamResponse& s, unsigned version) {
  s.head.version(version);
  s.head.keep_alive(false);
  s.head.chunked(true);
  if (s.head.find(bhttp::field::server) == s.head.end()) s.head.set(bhttp::field::server, options.server_name);
  bhttp::response_serializer<bhttp::empty_body> serializer(s.head);
  c.stream.expires_after(options.write_timeout);
  auto [ec, n] = co_await bhttp::async_write_header(c.stream, serializer, tuple_awaitable);
  if (ec || !s.produce) co_return;
  c.phase = Phase::streaming;
  if (stopping) co_return;

  // The producer races a read on the socket: a client never sends anything on a stream's
  // connection, so that read completes only when it disconnects (or stop() cancels it), and
  // the group then cancels the producer. Both operations complete on this strand.
  StreamWriter writer(c.stream, options.write_timeout);
  auto strand = co_await asio::this_coro::executor;
  std::array<char, 256> sink;
  auto producer = s.produce(writer);
  auto watch = c.stream.socket().async_read_some(asio::buffer(sink), asio::bind_executor(strand, asio::deferred));
  auto [order, error, read_ec, read_n] = co_await asio::experimental::make_parallel_group(
      asio::co_spawn(strand, std::move(producer), asio::deferred), std::move(watch))
      .async_wait(asio::experimental::wait_for_one(), use_awaitable);
  c.phase = Phase::busy;
  if (order[0] == 0) {
    if (error && classify(error) != ErrorKind::cancelled)
      spdlog::warn("http: stream producer failed: {}", describe(error));
    if (!error && writer.ok()) {
      c.stream.expires_after(options.write_timeout);
      co_await asio::async_write(c.stream, bhttp::make_chunk_last(), tuple_awaitable);
    }
  }
}

void HttpServer::State::remove(std::uint64_t id) {
  {
    std::lock_guard lock(mutex);
    connections.erase(id);
  }
  maybe_finished();
}

void HttpServer::State::maybe_finished() {
  {
    std::lock_guard lock(mutex);
    if (!stopping || accepting || !connections.empty()) return;
  }
  asio::post(accept_strand, [self = shared_from_this()] { self->grace_timer.cancel(); });
  stopped.set();
}

void HttpServer::State::force_close_all() {
  std::lock_guard lock(mutex);
  for (auto& [id, c] : connections)
    asio::post(c->strand, [c = c] {
      beast::error_code ignored;
      c->stream.socket().close(ignored);
      c->cancel.emit(asio::cancellation_type::terminal);
    });
}

// ---- HttpServer ------------------------------------------------------------------------

HttpServer::HttpServer(asio::any_io_executor executor, std::shared_ptr<RequestHandler> handler, ServerOptions options)
    : state_(std::make_shared<State>(std::move(executor), std::move(handler), std::move(options))) {
  if (!state_->handler) throw_error(ErrorKind::invalid_argument, "http server: a handler is required");
  if (state_->options.max_connections == 0)
    throw_error(ErrorKind::invalid_argument, "http server: max_connections must be >= 1");
}

HttpServer::~HttpServer() { stop(); }

tcp::endpoint HttpServer::listen() {
  auto& st = *state_;
  std::lock_guard lock(st.mutex);
  if (st.listening) return st.endpoint;
  const auto [host, port] = parse_listen_address(st.options.listen);
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) throw_error(ErrorKind::invalid_argument, "listen address '" + st.options.listen + "': '" + host +
                                                       "' is not an IP address");
  const tcp::endpoint wanted(address, port);
  auto fail = [&](const char* what) {
    throw_error(ErrorKind::transient, "cannot listen on " + st.options.listen + ": " + what + ": " + ec.message());
  };
  st.acceptor.open(wanted.protocol(), ec);
  if (ec) fail("open");
  st.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  st.acceptor.bind(wanted, ec);
  if (ec) {
    beast::error_code ignored;
    st.acceptor.close(ignored);
    fail("bind");
  }
  st.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("listen");
  st.endpoint = st.acceptor.local_endpoint();
  st.listening = true;
  return st.endpoint;
}

void HttpServer::start() {
  listen();
  std::lock_guard lock(state_->mutex);
  if (state_->accepting || state_->stopping) return;
  state_->accepting = true;
  auto done = [self = state_](std::exception_ptr e) {
    if (e) spdlog::error("http: accept loop failed: {}", describe(e));
    {
      std::lock_guard lock(self->mutex);
      self->accepting = false;
    }
    self->maybe_finished();
  };
  asio::co_spawn(state_->accept_strand, state_->accept_loop(), std::move(done));
}

tcp::endpoint HttpServer::local_endpoint() const {
  std::lock_guard lock(state_->mutex);
  return state_->endpoint;
}

void HttpServer::stop() {
  auto st = state_;
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard lock(st->mutex);
    if (st->stopping.exchange(true)) return;
    for (auto& [id, c] : st->connections) open.push_back(c);
  }
  asio::post(st->accept_strand, [st] {
    beast::error_code ignored;
    st->acceptor.close(ignored);
    st->grace_timer.expires_after(st->options.shutdown_grace);
    st->grace_timer.async_wait([st](beast::error_code ec) {
      if (!ec) st->force_close_all();
    });
  });
  // Idle and streaming connections end now; busy ones after their response (serve() checks
  // `stopping`). Runs on each connection's strand, so it sees a consistent phase.
  for (auto& c : open)
    asio::post(c->strand, [c] {
      if (c->phase == Phase::busy) return;
      beast::error_code ignored;
      c->stream.socket().cancel(ignored);
    });
  st->maybe_finished();
}

void HttpServer::join() { state_->stopped.wait(asio::use_future).get(); }

asio::awaitable<void> HttpServer::async_join() { co_await state_->stopped.wait(use_awaitable); }

std::size_t HttpServer::connection_count() const {
  std::lock_guard lock(state_->mutex);
  return state_->connections.size();
}

// ---- serve_bytes -----------------------------------------------------------------------

namespace {

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
      if (beast::iequals(parser.get()[bhttp::field::expect], "100-continue")) out += continue_response;
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
    if (auto* s = std::get_if<StreamResponse>(&*response)) {  // the head only, as run_stream sends it
      s->head.version(version);
      s->head.keep_alive(false);
      s->head.chunked(true);
      if (s->head.find(bhttp::field::server) == s->head.end()) s->head.set(bhttp::field::server, options.server_name);
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

// ---- helpers ---------------------------------------------------------------------------

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

StringResponse json_response(unsigned status, std::string body) {
  StringResponse res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = std::move(body);
  return res;
}

StringResponse error_response(unsigned status, std::string_view kind, std::string_view message) {
  boost::json::object error{{"kind", kind}, {"message", message}};
  auto res = json_response(status, boost::json::serialize(boost::json::object{{"error", std::move(error)}}));
  if (status == 429 || status == 503) res.set(bhttp::field::retry_after, "1");
  return res;
}

StringResponse error_response(ErrorKind kind, std::string_view message) {
  return error_response(static_cast<unsigned>(http_status_for(kind)), to_string(kind), message);
}

StringResponse error_response(const std::exception_ptr& error) {
  return error_response(classify(error), describe(error));
}

std::optional<ByteRange> parse_range(std::string_view header, std::uint64_t size) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  header = trim(header);
  if (!header.starts_with("bytes=")) return std::nullopt;
  auto spec = trim(header.substr(6));
  if (spec.find(',') != std::string_view::npos) return std::nullopt;
  const auto dash = spec.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto number = [](std::string_view s) -> std::optional<std::uint64_t> {
    std::uint64_t v = 0;
    const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || err != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
  };
  const auto first_text = trim(spec.substr(0, dash)), last_text = trim(spec.substr(dash + 1));
  if (first_text.empty()) {  // suffix: the last N bytes
    const auto n = number(last_text);
    if (!n) return std::nullopt;
    if (*n == 0 || size == 0) return ByteRange{0, 0, false};
    return ByteRange{size - std::min(*n, size), size - 1, true};
  }
  const auto first = number(first_text);
  if (!first) return std::nullopt;
  std::uint64_t last = size == 0 ? 0 : size - 1;
  if (!last_text.empty()) {
    const auto l = number(last_text);
    if (!l || *l < *first) return std::nullopt;
    last = std::min(*l, last);
  }
  if (*first >= size) return ByteRange{0, 0, false};
  return ByteRange{*first, last, true};
}

Response file_response(const Request& request, const std::filesystem::path& path, std::string_view content_type) {
  FileRange file;
  beast::error_code ec;
  file.open(path.c_str(), beast::file_mode::scan, ec);
  if (ec) throw_error(ErrorKind::not_found, "file '" + path.filename().string() + "': " + ec.message());
  const auto size = file.file_size(ec);
  if (ec) throw_error(ErrorKind::internal, "file '" + path.filename().string() + "': " + ec.message());

  std::optional<ByteRange> range;
  if (auto it = request.find(bhttp::field::range); it != request.end()) range = parse_range(it->value(), size);
  if (range && !range->satisfiable) {
    auto res = error_response(416, "invalid_argument", "range not satisfiable for " + std::to_string(size) + " bytes");
    res.set(bhttp::field::content_range, "bytes */" + std::to_string(size));
    res.set(bhttp::field::accept_ranges, "bytes");
    return res;
  }
  const std::uint64_t first = range ? range->first : 0;
  const std::uint64_t length = range ? range->last - range->first + 1 : size;
  file.set_range(first, length, ec);
  if (ec) throw_error(ErrorKind::internal, "file '" + path.filename().string() + "': " + ec.message());

  FileResponse res{range ? bhttp::status::partial_content : bhttp::status::ok, 11};
  res.set(bhttp::field::content_type, content_type);
  res.set(bhttp::field::accept_ranges, "bytes");
  if (range)
    res.set(bhttp::field::content_range, "bytes " + std::to_string(range->first) + "-" +
                                             std::to_string(range->last) + "/" + std::to_string(size));
  res.body().reset(std::move(file), ec);
  if (ec) throw_error(ErrorKind::internal, "file '" + path.filename().string() + "': " + ec.message());
  return res;
}

std::string sse_event(std::string_view event, std::string_view data) {
  std::string out = "event: ";
  out.append(event).append("\n");
  for (;;) {
    const auto nl = data.find('\n');
    out.append("data: ").append(data.substr(0, nl)).append("\n");
    if (nl == std::string_view::npos) break;
    data.remove_prefix(nl + 1);
  }
  out.append("\n");
  return out;
}

}  // namespace vgen::http
