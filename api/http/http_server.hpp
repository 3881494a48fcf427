// HttpServer: a small HTTP/1.1 server (Boost.Beast) on an Asio executor, written with C++20
// coroutines: the listening socket, the accept loop and each connection's lifecycle. It knows
// nothing about vgen jobs: a RequestHandler turns a request into a Response (buffered, file or
// stream; api/http/http_response.hpp). How one request is read and answered (limits, 100-continue,
// errors, message finishing) is api/http/http_exchange.hpp, which serve_bytes shares; the address
// syntax is api/http/listen_address.hpp. This header includes all three, so its users keep one
// include. A stream's head is sent with chunked encoding, then the handler's producer writes
// chunks over time (Server-Sent Events) until it returns or the client goes away; the
// connection closes after a stream.
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

#include "api/http/http_exchange.hpp"
#include "api/http/http_response.hpp"
#include "api/http/listen_address.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstddef>
#include <memory>

namespace vgen::http {

using tcp = asio::ip::tcp;

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

}  // namespace vgen::http
