// Fuzzes the HTTP front end without a socket: the input is the bytes a client sends on one
// connection, served by http::serve_bytes (api/http/http_exchange: Beast's request parser with our
// header/body limits, 400/413/431, keep-alive and pipelining, exception -> JSON error) with
// the real vgen::HttpApi (api/http/http_api: bearer-token auth via api/http/http_auth, routing with
// 404/405, Content-Type and JSON body checks, job-spec validation on POST /v1/jobs,
// status/video (Range)/cancel/events/metrics/healthz) over a fake Runtime
// (tests/fuzz/fake_runtime.cpp). A stream's producer is not run (serve_bytes sends its head
// only).
// Invariants: whatever the input, the output is a sequence of whole HTTP/1.x responses, and
// no status is 500 (every input error is the client's, so it is 4xx).
#include "api/http/http_api.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>

namespace {

namespace bhttp = boost::beast::http;
using vgen::fuzz::require;

struct Fixture {
  Fixture() : runtime(config()), api(runtime) {
    options.max_header_bytes = 2048;  // small, so that the fuzzer reaches the limits
    options.max_body_bytes = 1024;
  }
  static vgen::RuntimeConfig config() {
    vgen::RuntimeConfig c;
    c.service.token = "fuzz-token";
    return c;
  }
  vgen::Runtime runtime;
  vgen::HttpApi api;
  vgen::http::ServerOptions options;
};

// Every response in `out` is whole and none is a 5xx.
void check_responses(const std::string& out) {
  boost::beast::flat_buffer buffer;
  buffer.commit(boost::asio::buffer_copy(buffer.prepare(out.size()), boost::asio::buffer(out)));
  while (buffer.size() > 0) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.eager(true);
    parser.body_limit(1 << 20);
    boost::beast::error_code ec;
    while (!parser.is_header_done() || (!parser.is_done() && !parser.chunked())) {
      const auto n = parser.put(buffer.data(), ec);
      buffer.consume(n);
      require(!ec && n > 0, "serve_bytes: a whole HTTP response");
    }
    require(parser.get().result_int() < 500, "serve_bytes: no 5xx for any input");
    if (parser.chunked()) break;  // a stream's head: nothing follows on its connection
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Fixture fixture;  // for the whole run; its destructor removes the fake's files
  const auto out = vgen::http::serve_bytes(fixture.api, fixture.options, vgen::fuzz::text_of(data, size));
  check_responses(out);
  return 0;
}
