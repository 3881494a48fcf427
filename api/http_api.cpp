#include "api/http_api.hpp"

#include "api/http_auth.hpp"
#include "runtime/channel.hpp"

#include <boost/beast/core/string.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>

#include <filesystem>

namespace vgen {

namespace asio = boost::asio;
namespace json = boost::json;
namespace bhttp = boost::beast::http;

namespace {

struct RouteEntry {
  bhttp::verb method;
  std::string_view path;  // segments; "{id}" matches one non-empty segment
};

// The one route table: routes() and dispatch() both read it.
constexpr RouteEntry kRoutes[] = {
    {bhttp::verb::post, "/v1/jobs"},
    {bhttp::verb::get, "/v1/jobs/{id}"},
    {bhttp::verb::delete_, "/v1/jobs/{id}"},
    {bhttp::verb::get, "/v1/jobs/{id}/events"},
    {bhttp::verb::get, "/v1/jobs/{id}/video"},
    {bhttp::verb::get, "/metrics"},
    {bhttp::verb::get, "/healthz"},
};

// Matches `path` against a template; fills `id` for "{id}".
bool match(std::string_view pattern, std::string_view path, std::string& id) {
  while (!pattern.empty() || !path.empty()) {
    if (pattern.empty() || path.empty() || pattern.front() != '/' || path.front() != '/') return false;
    pattern.remove_prefix(1);
    path.remove_prefix(1);
    const auto pe = std::min(pattern.find('/'), pattern.size()), se = std::min(path.find('/'), path.size());
    const auto expected = pattern.substr(0, pe), got = path.substr(0, se);
    if (expected == "{id}") {
      if (got.empty()) return false;
      id = std::string(got);
    } else if (expected != got) {
      return false;
    }
    pattern.remove_prefix(pe);
    path.remove_prefix(se);
  }
  return true;
}

std::string job_path(const std::string& id) { return "/v1/jobs/" + id; }

json::object links_of(const std::string& id) {
  const auto self = job_path(id);
  return {{"self", self}, {"events", self + "/events"}, {"video", self + "/video"}};
}

// to_json(JobResult) with live progress and links; the output's server path is reduced to
// its file name (clients fetch it through /video).
json::object status_json(const JobHandle& job, const JobResult& r) {
  auto o = to_json(r);
  if (auto it = o.find("output"); it != o.end()) {
    o["output_name"] = std::filesystem::path(r.output).filename().string();
    o.erase("output");
  }
  const auto s = job.snapshot();
  o["progress"] = json::object{{"state", to_string(s.state)}, {"step", s.step}, {"total", s.total}};
  o["queued_seconds"] = s.queued_seconds;
  o["links"] = links_of(r.id);
  return o;
}

json::object event_json(const JobEvent& e) {
  json::object o{{"id", e.job_id}, {"state", to_string(e.state)}, {"step", e.step}, {"total", e.total}};
  if (!e.message.empty()) o["message"] = e.message;
  return o;
}

http::StringResponse json_body(unsigned status, const json::object& o) {
  return http::json_response(status, json::serialize(o));
}

json::value parse_body(const std::string& body) {
  json::stream_parser parser;
  boost::system::error_code ec;
  const auto used = parser.write(body.data(), body.size(), ec);
  if (!ec) parser.finish(ec);
  if (ec)
    throw_error(ErrorKind::invalid_argument,
                "request body is not valid JSON: " + ec.message() + " (at byte " + std::to_string(used) + ")");
  return parser.release();
}

// The event stream of one job: what it has done so far, each event from now on, and the final
// state. Runs on the connection's strand; cancelled when the client goes away.
asio::awaitable<void> stream_events(JobHandle job, http::StreamWriter& out) {
  auto events = std::make_shared<BoundedChannel<JobEvent>>(256);
  const auto token = job.subscribe([events](const JobEvent& e) {
    if (is_terminal(e.state)) events->close();  // end of stream; the result says the rest
    else events->try_enqueue(JobEvent(e));      // full: a slow client misses this one
  });
  struct Unsubscribe {
    JobHandle job;
    std::size_t token;
    ~Unsubscribe() { job.unsubscribe(token); }
  } unsubscribe{job, token};

  const auto now = job.snapshot();
  const JobEvent current{now.id, now.state, now.step, now.total, now.error};
  // Each chunk is a named local: GCC 12 mishandles class temporaries inside co_await operands.
  std::string chunk = http::sse_event("progress", json::serialize(event_json(current)));
  if (!co_await out.write(std::move(chunk))) co_return;
  if (job.finished() || is_terminal(now.state)) events->close();  // ended before we subscribed
  while (auto e = co_await events->dequeue(asio::use_awaitable)) {
    chunk = http::sse_event("progress", json::serialize(event_json(*e)));
    if (!co_await out.write(std::move(chunk))) co_return;
  }
  const JobResult result = co_await job.async_wait();
  chunk = http::sse_event(to_string(result.state), json::serialize(status_json(job, result)));
  co_await out.write(std::move(chunk));
}

}  // namespace

HttpApi::HttpApi(JobService& jobs) : runtime_(jobs) {}

std::vector<HttpApi::Route> HttpApi::routes() {
  std::vector<Route> out;
  for (const auto& r : kRoutes) out.push_back({std::string(bhttp::to_string(r.method)), std::string(r.path)});
  return out;
}

asio::awaitable<http::Response> HttpApi::handle(http::Request request) { co_return dispatch(request); }

bool HttpApi::authorized(const http::Request& request) const {
  return http::bearer_authorized(request, runtime_.config().service.token);
}

http::Response HttpApi::dispatch(const http::Request& request) {
  auto target = std::string_view(request.target());
  const auto path = target.substr(0, target.find('?'));
  if (path != "/healthz" && !authorized(request)) {
    auto res = http::error_response(401, "unauthorized", "missing or wrong bearer token (Authorization: Bearer <token>)");
    res.set(bhttp::field::www_authenticate, "Bearer");
    return res;
  }
  std::string allow, id;
  for (std::size_t i = 0; i < std::size(kRoutes); ++i) {
    if (!match(kRoutes[i].path, path, id)) continue;
    if (kRoutes[i].method == request.method()) return (this->*handler_at(i))(request, id);
    allow += (allow.empty() ? "" : ", ") + std::string(bhttp::to_string(kRoutes[i].method));
  }
  if (allow.empty()) return http::error_response(404, "not_found", "no route for " + std::string(path));
  auto res = http::error_response(405, "method_not_allowed",
                                  std::string(request.method_string()) + " is not allowed on " + std::string(path));
  res.set(bhttp::field::allow, allow);
  return res;
}

JobHandle HttpApi::find_job(const std::string& id) const {
  auto job = runtime_.find(id);
  if (!job) throw_error(ErrorKind::not_found, "job '" + id + "' not found");
  return *job;
}

http::Response HttpApi::submit_job(const http::Request& request, const std::string&) {
  if (auto it = request.find(bhttp::field::content_type); it != request.end()) {
    const auto type = it->value().substr(0, it->value().find(';'));
    if (!boost::beast::iequals(boost::beast::string_view(type.data(), type.size()), "application/json"))
      return http::error_response(415, "invalid_argument",
                                  "Content-Type must be application/json (got '" + std::string(it->value()) + "')");
  }
  auto spec = parse_body(request.body());
  if (!spec.is_object()) throw_error(ErrorKind::invalid_argument, "request body: must be a JSON object (a job spec)");
  const auto job = runtime_.try_submit(std::move(spec), SubmitOptions{});  // never waits: Error(overloaded) -> 429
  auto res = json_body(202, {{"id", job.id()}, {"status", "queued"}, {"links", links_of(job.id())}});
  res.set(bhttp::field::location, job_path(job.id()));
  return res;
}

http::Response HttpApi::job_status(const http::Request&, const std::string& id) {
  const auto job = find_job(id);
  return json_body(200, status_json(job, job.result()));
}

http::Response HttpApi::job_events(const http::Request&, const std::string& id) {
  const auto job = find_job(id);
  http::StreamResponse s;
  s.head.result(bhttp::status::ok);
  s.head.set(bhttp::field::content_type, "text/event-stream");
  s.head.set(bhttp::field::cache_control, "no-cache");
  s.produce = [job](http::StreamWriter& out) { return stream_events(job, out); };
  return s;
}

http::Response HttpApi::job_video(const http::Request& request, const std::string& id) {
  const auto job = find_job(id);
  const auto r = job.result();
  if (!job.finished())
    return http::error_response(409, "not_ready", "job '" + id + "' has not finished (status: " +
                                                      std::string(to_string(r.state)) + ")");
  if (r.state != JobState::done)
    return http::error_response(409, "not_ready", "job '" + id + "' ended " + std::string(to_string(r.state)) +
                                                      (r.error.empty() ? "" : ": " + r.error) + "; it has no video");
  if (std::filesystem::is_directory(r.output))
    return http::error_response(409, "not_ready", "job '" + id + "' wrote a frame directory (format png), not a video file");
  return http::file_response(request, r.output, r.content_type);
}

http::Response HttpApi::cancel_job(const http::Request&, const std::string& id) {
  auto job = find_job(id);
  const bool requested = job.cancel("cancelled by DELETE " + job_path(id));
  return json_body(requested ? 202 : 200, status_json(job, job.result()));
}

http::Response HttpApi::metrics(const http::Request&, const std::string&) {
  http::StringResponse res{bhttp::status::ok, 11};
  res.set(bhttp::field::content_type, "text/plain; version=0.0.4");
  res.body() = runtime_.metrics_text();
  return res;
}

http::Response HttpApi::health(const http::Request&, const std::string&) {
  return http::json_response(200, R"({"status":"ok"})");
}

// In kRoutes' order (the anonymous table cannot name private members).
HttpApi::Handler HttpApi::handler_at(std::size_t i) {
  static constexpr Handler handlers[] = {&HttpApi::submit_job, &HttpApi::job_status, &HttpApi::cancel_job,
                                         &HttpApi::job_events, &HttpApi::job_video,  &HttpApi::metrics,
                                         &HttpApi::health};
  static_assert(std::size(handlers) == std::size(kRoutes));
  return handlers[i];
}

}  // namespace vgen
