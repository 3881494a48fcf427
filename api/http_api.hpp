// HttpApi: the vgen HTTP routes over a JobService (a vgen::Runtime, or the fleet's
// FleetClient for `vgen serve --queue`), as a RequestHandler for HttpServer.
//
//   POST   /v1/jobs              submit a job spec (JSON) -> 202 {id, status, links} + Location
//   GET    /v1/jobs/{id}         status: to_json(JobResult) plus live progress
//   GET    /v1/jobs/{id}/events  Server-Sent Events: `progress` per job event, then one final
//                                `done` | `failed` | `cancelled` event, then the stream ends
//   GET    /v1/jobs/{id}/video   the output file (Range requests: 206 / 416; 409 until done)
//   DELETE /v1/jobs/{id}         cancel
//   GET    /metrics              Prometheus text (Runtime::metrics_text)
//   GET    /healthz              {"status": "ok"}
// docs/openapi.json describes the same routes; tests/api/test_http_api.cpp keeps them in sync
// with routes().
//
// Errors: handlers throw vgen::Error; the server maps it once (error_response ->
// http_status_for): invalid_argument 400, not_found 404, overloaded 429 with Retry-After, ...
// Protocol errors (401, 405 with Allow, 409, 415) use the same JSON error body.
// Auth: when config().service.token is set, every route but /healthz needs
// "Authorization: Bearer <token>" (401 otherwise), checked before routing by
// http::bearer_authorized (api/http_auth: the scheme in any letter case, constant-time compare).
// Threads: handle() never blocks (submission uses Runtime::try_submit); it keeps no mutable
// state, so concurrent calls from different connections are safe. Job events arrive on worker
// threads and reach the event stream through a BoundedChannel; a client too slow to take
// them misses progress events, never the final one.
// Lifetime: the JobService must outlive the HttpApi and every stream it started (stop and join
// the server before destroying the Runtime).
#pragma once

#include "api/engine.hpp"
#include "api/http_server.hpp"

#include <string>
#include <vector>

namespace vgen {

class HttpApi : public http::RequestHandler {
 public:
  explicit HttpApi(JobService& jobs);

  boost::asio::awaitable<http::Response> handle(http::Request request) override;

  struct Route {
    std::string method;  // GET, POST, DELETE
    std::string path;    // OpenAPI path template, e.g. /v1/jobs/{id}
  };
  static std::vector<Route> routes();

 private:
  using Handler = http::Response (HttpApi::*)(const http::Request&, const std::string& id);
  static Handler handler_at(std::size_t route);  // the handler of routes()[route]
  http::Response dispatch(const http::Request& request);
  bool authorized(const http::Request& request) const;

  http::Response submit_job(const http::Request& request, const std::string& id);
  http::Response job_status(const http::Request& request, const std::string& id);
  http::Response job_events(const http::Request& request, const std::string& id);
  http::Response job_video(const http::Request& request, const std::string& id);
  http::Response cancel_job(const http::Request& request, const std::string& id);
  http::Response metrics(const http::Request& request, const std::string& id);
  http::Response health(const http::Request& request, const std::string& id);

  JobHandle find_job(const std::string& id) const;  // Error(not_found)

  JobService& runtime_;  // whoever runs the jobs
};

}  // namespace vgen
