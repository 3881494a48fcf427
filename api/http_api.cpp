#include "api/http_api.hpp"

#include "api/http_auth.hpp"
#include "api/multipart.hpp"
#include "runtime/channel.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
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

constexpr const char* kImageFields[] = {"image", "last_image"};

bool has_content_type(const http::Request& request, std::string_view type) {
  const auto it = request.find(bhttp::field::content_type);
  if (it == request.end()) return false;
  const auto value = it->value().substr(0, it->value().find(';'));
  return boost::beast::iequals(boost::beast::string_view(value.data(), value.size()),
                               boost::beast::string_view(type.data(), type.size()));
}

// A submission whose body may carry images goes to the uploads thread: multipart, or JSON
// that names an image field (a cheap look; the parse decides).
bool may_carry_images(const http::Request& request) {
  if (request.method() != bhttp::verb::post) return false;
  if (has_content_type(request, "multipart/form-data")) return true;
  return request.body().find("image\"") != std::string::npos;
}

// A job spec and the image bytes that came with it, by field.
struct Submission {
  json::value spec;
  std::vector<std::pair<std::string, std::string>> images;
};

Submission read_multipart(const http::Request& request, std::uint64_t max_image_bytes) {
  const auto it = request.find(bhttp::field::content_type);
  const auto boundary = multipart_boundary(std::string_view(it->value().data(), it->value().size()));
  const auto parts = parse_multipart(request.body(), boundary);
  Submission s;
  for (const auto& part : parts)
    if (part.name != "spec" && part.name != "image" && part.name != "last_image")
      throw_error(ErrorKind::invalid_argument, "multipart: unknown field '" + part.name + "' (known: spec, image, last_image)");
  const auto* spec = find_part(parts, "spec");
  if (!spec) throw_error(ErrorKind::invalid_argument, "multipart: no 'spec' field (the job spec as JSON)");
  s.spec = parse_body(std::string(spec->body));
  if (!s.spec.is_object()) throw_error(ErrorKind::invalid_argument, "spec: must be a JSON object (a job spec)");
  for (const char* field : kImageFields) {
    const auto* part = find_part(parts, field);
    if (!part) continue;
    if (s.spec.as_object().contains(field))
      throw_error(ErrorKind::invalid_argument, std::string(field) + ": given twice (a file part and a spec field)");
    if (part->body.size() > max_image_bytes)
      throw_error(ErrorKind::invalid_argument, std::string(field) + ": larger than " + std::to_string(max_image_bytes) +
                                                   " bytes (got " + std::to_string(part->body.size()) + ")");
    s.images.emplace_back(field, std::string(part->body));
  }
  return s;
}

// JSON: an image field holds the picture itself (base64 or a data URL), never a server path.
Submission read_json(const http::Request& request, std::uint64_t max_image_bytes) {
  Submission s{parse_body(request.body()), {}};
  if (!s.spec.is_object()) throw_error(ErrorKind::invalid_argument, "request body: must be a JSON object (a job spec)");
  for (const char* field : kImageFields) {
    const auto* v = s.spec.as_object().if_contains(field);
    if (v == nullptr || !v->is_string()) continue;  // another type: validation names it
    s.images.emplace_back(field, decode_image_text(std::string_view(v->get_string()), field, max_image_bytes));
  }
  return s;
}

}  // namespace

HttpApi::HttpApi(Runtime& runtime)
    : runtime_(runtime),
      uploads_(std::make_shared<UploadStore>(runtime.config().output_dir / "uploads",
                                             ImageLimits{.max_bytes = runtime.config().image_max_bytes,
                                                         .max_pixels = runtime.config().image_max_pixels})) {
  // What a crash left: keep the images of the jobs that resume, remove the rest.
  for (const auto& job : runtime_.unfinished()) {
    const auto spec = job.result().spec;
    std::vector<std::filesystem::path> files;
    for (const auto* path : {&spec.image, &spec.last_image})
      if (!path->empty()) files.emplace_back(*path);
    for (const auto& f : files) uploads_->pin(f);
    if (!files.empty()) release_when_finished(job, std::move(files));
  }
  uploads_->sweep();
}

HttpApi::~HttpApi() { upload_thread_.join(); }

void HttpApi::release_when_finished(const JobHandle& job, std::vector<std::filesystem::path> files) {
  auto watch = [](JobHandle job, std::vector<std::filesystem::path> files, std::shared_ptr<UploadStore> uploads,
                  std::shared_ptr<Cancels> cancels) -> asio::awaitable<void> {
    const JobResult r = co_await job.async_wait();
    bool by_client = false;
    {
      std::lock_guard lock(cancels->mutex);
      by_client = cancels->ids.erase(r.id) > 0;
    }
    if (r.state == JobState::cancelled && !by_client) co_return;  // a graceful stop: it resumes with these files
    for (const auto& f : files) uploads->unpin(f);
  };
  asio::co_spawn(runtime_.executor(), watch(job, std::move(files), uploads_, cancels_), asio::detached);
}

std::vector<HttpApi::Route> HttpApi::routes() {
  std::vector<Route> out;
  for (const auto& r : kRoutes) out.push_back({std::string(bhttp::to_string(r.method)), std::string(r.path)});
  return out;
}

asio::awaitable<http::Response> HttpApi::handle(http::Request request) {
  if (!may_carry_images(request)) co_return dispatch(request);
  // Decoding and writing images blocks: on the uploads thread, resuming on this strand after.
  co_return co_await asio::co_spawn(
      upload_thread_, [this, &request]() -> asio::awaitable<http::Response> { co_return dispatch(request); },
      asio::use_awaitable);
}

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
  const bool multipart = has_content_type(request, "multipart/form-data");
  if (!multipart && !has_content_type(request, "application/json"))
    if (auto it = request.find(bhttp::field::content_type); it != request.end())
      return http::error_response(415, "invalid_argument",
                                  "Content-Type must be application/json or multipart/form-data (got '" +
                                      std::string(it->value()) + "')");
  const auto max_image = runtime_.config().image_max_bytes;
  auto [spec, images] = multipart ? read_multipart(request, max_image) : read_json(request, max_image);
  std::vector<std::filesystem::path> files;
  if (!images.empty()) {
    // Every field checked before anything is written: a model that takes no image refuses here.
    auto probe = spec;
    for (const auto& [field, bytes] : images) probe.as_object()[field] = (uploads_->dir() / "pending.png").string();
    runtime_.validate(probe);
    try {
      for (const auto& [field, bytes] : images) {
        files.push_back(uploads_->put(bytes, field));
        spec.as_object()[field] = files.back().string();
      }
    } catch (...) {
      for (const auto& f : files) uploads_->unpin(f);
      throw;
    }
  }
  JobHandle job;
  try {
    job = runtime_.try_submit(std::move(spec));  // never waits: Error(overloaded) -> 429
  } catch (...) {
    for (const auto& f : files) uploads_->unpin(f);  // refused: nothing stays written
    throw;
  }
  if (!files.empty()) release_when_finished(job, std::move(files));
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
  {
    std::lock_guard lock(cancels_->mutex);
    const auto spec = job.result().spec;
    if (!job.finished() && !(spec.image.empty() && spec.last_image.empty())) cancels_->ids.insert(id);  // its uploads go when it ends
  }
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
