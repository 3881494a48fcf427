#include "api/http/http_server.hpp"

#include "runtime/errors.hpp"
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
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
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
      if (expects_continue(parser)) {
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
  finish_stream_head(s.head, version, options.server_name);
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
  const tcp::endpoint endpoint = listen_endpoint(st.options.listen);
  boost::system::error_code ec;
  auto fail = [&](const char* what) {
    throw_error(ErrorKind::transient, "cannot listen on " + st.options.listen + ": " + what + ": " + ec.message());
  };
  st.acceptor.open(endpoint.protocol(), ec);
  if (ec) fail("open");
  st.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  st.acceptor.bind(endpoint, ec);
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

}  // namespace vgen::http
