#include "api/http/http_api.hpp"

#include "api/http/http_auth.hpp"
#include "api/http/live_video.hpp"
#include "api/http/multipart.hpp"
#include "api/http/web_page.hpp"
#include "runtime/channel.hpp"
#include "runtime/trace.hpp"
#include "stages/model/lora_files.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

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
    {bhttp::verb::get, "/v1/jobs"},
    {bhttp::verb::get, "/v1/jobs/{id}"},
    {bhttp::verb::delete_, "/v1/jobs/{id}"},
    {bhttp::verb::get, "/v1/jobs/{id}/events"},
    {bhttp::verb::get, "/v1/jobs/{id}/video"},
    {bhttp::verb::get, "/v1/jobs/{id}/preview"},
    {bhttp::verb::get, "/metrics"},
    {bhttp::verb::get, "/healthz"},
    {bhttp::verb::get, "/"},
    {bhttp::verb::get, "/ui/{id}"},
    {bhttp::verb::get, "/v1/trace"},
    {bhttp::verb::get, "/v1/loras"},
};

// Routes that need no token: the health check and the page's files (they hold no data; the
// page asks for the token and sends it on its API calls).
bool is_public(std::string_view path) { return path == "/healthz" || path == "/" || path.rfind("/ui/", 0) == 0; }

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
  return {{"self", self}, {"events", self + "/events"}, {"video", self + "/video"}, {"preview", self + "/preview"}};
}

// to_json(JobResult) with live progress and links; the output's server path is reduced to
// its file name (clients fetch it through /video).
json::object status_json(const JobHandle& job, const JobResult& r) {
  auto o = to_json(r);
  if (auto* spec = o.if_contains("spec"); spec && spec->is_object())  // no "name": "" (the schema's pattern refuses it)
    if (const auto* name = spec->as_object().if_contains("name"); name && name->is_string() && name->get_string().empty())
      spec->as_object().erase("name");
  if (auto it = o.find("output"); it != o.end()) {
    o["output_name"] = std::filesystem::path(r.output).filename().string();
    o.erase("output");
  }
  const auto s = job.snapshot();
  json::object progress{{"state", s.status()}, {"step", s.step}, {"total", s.total}};
  for (const auto& kv : s.detail) progress[kv.key()] = kv.value();  // what the stages say (denoise_news.hpp)
  o["progress"] = std::move(progress);
  o["queued_seconds"] = s.queued_seconds;
  o["links"] = links_of(r.id);
  return o;
}

// A job the store still records but the Runtime no longer holds in memory (its job_ttl passed).
json::object record_json(const JobRecord& r) {
  json::object o{{"id", r.id}, {"status", r.status}, {"seconds", r.seconds}, {"retries", r.retries},
                 {"cache_hit", r.cache_hit}, {"spec", r.spec}};
  if (r.status == "done") {
    o["output_name"] = std::filesystem::path(r.output).filename().string();
    o["content_type"] = r.content_type;
  }
  if (!r.error_kind.empty()) o["error"] = json::object{{"kind", r.error_kind}, {"message", r.error}};
  if (r.finished_unix > 0) o["finished_unix"] = r.finished_unix;
  o["progress"] = json::object{{"state", r.status}, {"step", r.step}, {"total", r.total}};
  o["links"] = links_of(r.id);
  return o;
}

json::object preview_json(const std::string& id, const JobPreview& p) {
  return {{"id", id},         {"step", p.step},       {"total", p.total}, {"width", p.width},
          {"height", p.height}, {"content_type", p.content_type}, {"url", job_path(id) + "/preview"}};
}

// GET /v1/jobs's parameters: status, limit (1..200, default 20), cursor (a next_cursor).
JobListQuery list_query(std::string_view target) {
  JobListQuery q;
  q.limit = 20;
  for (const auto& [key, value] : http::parse_query(target)) {
    if (key == "status") {
      static constexpr std::string_view known[] = {"queued", "running", "done", "failed", "cancelled", "interrupted"};
      if (std::find(std::begin(known), std::end(known), value) == std::end(known))
        throw_error(ErrorKind::invalid_argument, "status: must be one of queued, running, done, failed, cancelled, "
                                                 "interrupted (got '" + truncate_utf8(value, 40) + "')");
      q.status = value;
    } else if (key == "cursor" && value.empty()) {
      continue;  // the first page, as without one
    } else if (key == "limit" || key == "cursor") {
      std::uint64_t n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      const bool ok = ec == std::errc() && end == value.data() + value.size() && !value.empty() &&
                      (key == "limit" ? n >= 1 && n <= 200 : n >= 1);
      if (!ok)
        throw_error(ErrorKind::invalid_argument, key == "limit" ? "limit: must be an integer in [1, 200] (got '" + truncate_utf8(value, 40) + "')"
                                                                : "cursor: must be a next_cursor from an earlier page (got '" + truncate_utf8(value, 40) + "')");
      if (key == "limit") q.limit = static_cast<std::size_t>(n);
      else q.before = n;
    } else {
      throw_error(ErrorKind::invalid_argument, "unknown query parameter '" + truncate_utf8(key, 40) + "' (known: status, limit, cursor)");
    }
  }
  return q;
}

json::object event_json(const JobEvent& e) {
  json::object o{{"id", e.job_id}, {"state", e.status()}, {"step", e.step}, {"total", e.total}};
  if (!e.message.empty()) o["message"] = e.message;
  for (const auto& kv : e.detail) o[kv.key()] = kv.value();  // what the stage says (denoise_news.hpp)
  return o;
}

using http::json_body;

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
  JobEvent current;
  current.job_id = now.id;
  current.state = now.state;
  current.stage = now.stage;
  current.step = now.step;
  current.total = now.total;
  current.message = now.error;
  // Each chunk is a named local: GCC 12 mishandles class temporaries inside co_await operands.
  std::string chunk = http::sse_event("progress", json::serialize(event_json(current)));
  if (!co_await out.write(std::move(chunk))) co_return;
  if (const auto preview = job.preview(); preview && !job.finished()) {  // the one made before we subscribed
    chunk = http::sse_event("preview", json::serialize(preview_json(now.id, *preview)));
    if (!co_await out.write(std::move(chunk))) co_return;
  }
  if (job.finished() || is_terminal(now.state)) events->close();  // ended before we subscribed
  while (auto e = co_await events->dequeue(asio::use_awaitable)) {
    const auto preview = preview_of(*e);
    if (e->attachment && !preview) continue;  // an attachment this stream does not show
    chunk = preview ? http::sse_event("preview", json::serialize(preview_json(e->job_id, *preview)))
                    : http::sse_event("progress", json::serialize(event_json(*e)));
    if (!co_await out.write(std::move(chunk))) co_return;
  }
  const JobResult result = co_await job.async_wait();
  chunk = http::sse_event(to_string(result.state), json::serialize(status_json(job, result)));
  co_await out.write(std::move(chunk));
}

// A submission whose body may carry images goes to the uploads thread: multipart, or JSON
// that names an image field (a cheap look; the parse decides).
bool may_carry_images(const http::Request& request) {
  if (request.method() != bhttp::verb::post) return false;
  if (http::has_content_type(request, "multipart/form-data")) return true;
  return request.body().find("image\"") != std::string::npos || request.body().find("video\"") != std::string::npos ||
         request.body().find("images\"") != std::string::npos;
}

// Whether the request touches the disk: an upload to decode and write, or GET /v1/loras's
// directory scan (a slow or network lora_dir must not hold an io thread).
bool touches_files(const http::Request& request) {
  if (may_carry_images(request)) return true;
  const auto target = std::string_view(request.target());
  return request.method() == bhttp::verb::get && target.substr(0, target.find('?')) == "/v1/loras";
}

// A job spec and the upload bytes that came with it (api/http/uploads.hpp names the fields).
struct Submission {
  json::value spec;
  UploadBytes images;
};

Submission read_multipart(const http::Request& request, std::uint64_t max_image_bytes, std::uint64_t max_video_bytes) {
  const auto it = request.find(bhttp::field::content_type);
  const auto boundary = multipart_boundary(std::string_view(it->value().data(), it->value().size()));
  const auto parts = parse_multipart(request.body(), boundary);
  for (const auto& part : parts)
    if (part.name != "spec" && !is_upload_field(part.name))
      throw_error(ErrorKind::invalid_argument, "multipart: unknown field '" + part.name +
                                                   "' (known: spec, image, last_image, video, mask_video, reference_images)");
  const auto* spec = find_part(parts, "spec");
  if (!spec) throw_error(ErrorKind::invalid_argument, "multipart: no 'spec' field (the job spec as JSON)");
  Submission s{parse_body(std::string(spec->body)), {}};
  if (!s.spec.is_object()) throw_error(ErrorKind::invalid_argument, "spec: must be a JSON object (a job spec)");
  s.images = multipart_uploads(s.spec.as_object(), parts, max_image_bytes, max_video_bytes);
  return s;
}

// JSON: an image field holds the picture itself (base64 or a data URL), never a server path.
Submission read_json(const http::Request& request, std::uint64_t max_image_bytes, std::uint64_t max_video_bytes) {
  Submission s{parse_body(request.body()), {}};
  if (!s.spec.is_object()) throw_error(ErrorKind::invalid_argument, "request body: must be a JSON object (a job spec)");
  s.images = json_uploads(s.spec.as_object(), max_image_bytes, max_video_bytes);
  return s;
}

// The uploaded files a job's spec names (what its pins are for).
std::vector<std::filesystem::path> upload_files(const JobSpec& spec) {
  std::vector<std::filesystem::path> files;
  for (const auto* path : {&spec.image, &spec.last_image, &spec.video, &spec.mask_video})
    if (!path->empty()) files.emplace_back(*path);
  for (const auto& r : spec.reference_images) files.emplace_back(r);
  return files;
}

// ?seconds=N of GET /v1/trace: 1..60, default 5.
std::chrono::seconds trace_seconds(std::string_view target) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return std::chrono::seconds(5);
  auto query = target.substr(q + 1);
  while (!query.empty()) {
    const auto amp = std::min(query.find('&'), query.size());
    const auto pair = query.substr(0, amp);
    query.remove_prefix(std::min(amp + 1, query.size()));
    if (pair.substr(0, 8) != "seconds=") continue;
    const auto text = std::string(pair.substr(8));
    char* end = nullptr;
    const long n = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || n < 1 || n > 60)
      throw_error(ErrorKind::invalid_argument, "seconds: must be a whole number from 1 to 60 (got '" + text + "')");
    return std::chrono::seconds(n);
  }
  return std::chrono::seconds(5);
}

// Records the runtime's timeline for `seconds`, then sends it as one chunk. The capture ends
// however the producer ends (a client that goes away cancels the wait).
asio::awaitable<void> stream_trace(Tracer& tracer, std::chrono::seconds seconds, http::StreamWriter& out) {
  struct Capture {
    Tracer& tracer;
    Tracer::clock::time_point start = tracer.begin();
    std::optional<json::value> ended;
    json::value end() { return *(ended = tracer.end(start)); }
    ~Capture() { if (!ended) tracer.end(start); }
  } capture{tracer};
  asio::steady_timer timer(co_await asio::this_coro::executor, seconds);
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  if (ec) co_return;
  std::string body = json::serialize(capture.end());
  co_await out.write(std::move(body));
}

}  // namespace

HttpApi::HttpApi(JobService& runtime, std::filesystem::path web_dir)
    : runtime_(runtime),
      uploads_(std::make_shared<UploadStore>(runtime.config().output_dir / "uploads", runtime.config().images, runtime.config().videos)),
      web_dir_(std::move(web_dir)) {
  // What a crash left: keep the images of the jobs that resume, remove the rest.
  for (const auto& job : runtime_.unfinished()) {
    auto files = upload_files(job.result().spec);
    for (const auto& f : files) uploads_->pin(f);
    if (!files.empty()) release_when_finished(job, std::move(files));
  }
  uploads_->sweep();
  OpenAiVideos::Hooks hooks{[this](json::value spec, std::vector<std::pair<std::string, std::string>> images) {
                              return submit_spec(std::move(spec), std::move(images));
                            },
                            [this](JobHandle& job, std::string reason) { cancel_by_client(job, std::move(reason)); }};
  videos_ = std::make_unique<OpenAiVideos>(runtime_, std::move(hooks), upload_thread_.get_executor());
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
  for (auto& [method, path] : OpenAiVideos::routes()) out.push_back({std::move(method), std::move(path)});
  return out;
}

asio::awaitable<http::Response> HttpApi::handle(http::Request request) {
  if (const auto target = std::string_view(request.target()); OpenAiVideos::serves(target.substr(0, target.find('?'))))
    co_return co_await videos_->handle(std::move(request));
  if (request.method() == bhttp::verb::post && runtime_.submit_is_remote() && !may_carry_images(request))
    // The fleet's submit is a broker round trip (202 only after its ack): not on an io thread. (wt-nats)
    co_return co_await asio::co_spawn(
        runtime_.executor(), [this, &request]() -> asio::awaitable<http::Response> { co_return dispatch(request); },
        asio::use_awaitable);
  if (!touches_files(request)) co_return dispatch(request);
  // Decoding and writing images, and listing LoRA files, block: on the uploads thread, resuming
  // on this strand after.
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
  if (!is_public(path) && !authorized(request)) {
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
  if (!job || videos_->deleted(id)) throw_error(ErrorKind::not_found, "job '" + id + "' not found");
  return *job;
}

JobHandle HttpApi::submit_spec(json::value spec, UploadBytes images) {
  std::vector<std::filesystem::path> files;
  if (!images.empty()) {
    // Every field checked before anything is written: a model that takes no image refuses here.
    UploadPaths pending;
    for (const auto& [field, bytes] : images)
      pending.emplace_back(field, (uploads_->dir() / (is_video_upload_field(field) ? "pending.mp4" : "pending.png")).string());
    runtime_.validate(with_upload_paths(spec.as_object(), pending));
    UploadPaths stored;
    try {
      for (const auto& [field, bytes] : images) {
        files.push_back(is_video_upload_field(field) ? uploads_->put_video(bytes, field) : uploads_->put(bytes, field));
        stored.emplace_back(field, files.back().string());
      }
    } catch (...) {
      for (const auto& f : files) uploads_->unpin(f);
      throw;
    }
    spec = with_upload_paths(std::move(spec.as_object()), stored);
  }
  JobHandle job;
  try {
    job = runtime_.try_submit(std::move(spec), SubmitOptions{});  // never waits: Error(overloaded) -> 429
  } catch (...) {
    for (const auto& f : files) uploads_->unpin(f);  // refused: nothing stays written
    throw;
  }
  if (!files.empty()) release_when_finished(job, std::move(files));
  return job;
}

bool HttpApi::cancel_by_client(JobHandle& job, std::string reason) {
  {
    std::lock_guard lock(cancels_->mutex);
    if (!job.finished() && !upload_files(job.result().spec).empty())
      cancels_->ids.insert(job.id());  // its uploads go when it ends
  }
  return job.cancel(std::move(reason));
}

http::Response HttpApi::submit_job(const http::Request& request, const std::string&) {
  const bool multipart = http::has_content_type(request, "multipart/form-data");
  if (!multipart && !http::has_content_type(request, "application/json"))
    if (auto it = request.find(bhttp::field::content_type); it != request.end())
      return http::error_response(415, "invalid_argument",
                                  "Content-Type must be application/json or multipart/form-data (got '" +
                                      std::string(it->value()) + "')");
  const auto max_image = runtime_.config().images.max_bytes;
  const auto max_video = runtime_.config().videos.max_bytes;
  auto [spec, images] = multipart ? read_multipart(request, max_image, max_video) : read_json(request, max_image, max_video);
  const auto job = submit_spec(std::move(spec), std::move(images));
  auto res = json_body(202, {{"id", job.id()}, {"status", "queued"}, {"links", links_of(job.id())}});
  res.set(bhttp::field::location, job_path(job.id()));
  return res;
}

http::Response HttpApi::list_jobs(const http::Request& request, const std::string&) {
  const auto query = list_query(request.target());
  const auto page = runtime_.list_jobs(query);
  json::array items;
  for (const auto& record : page.jobs) {
    if (videos_->deleted(record.id)) continue;  // deleted through /v1/videos
    const auto job = runtime_.find(record.id);
    items.push_back(job ? status_json(*job, job->result()) : record_json(record));
  }
  json::object o{{"jobs", std::move(items)}};
  o["next_cursor"] = page.next ? json::value(std::to_string(page.next)) : json::value(nullptr);
  if (page.next) {
    auto next = "/v1/jobs?limit=" + std::to_string(query.limit) + "&cursor=" + std::to_string(page.next);
    if (!query.status.empty()) next += "&status=" + query.status;
    o["links"] = json::object{{"next", next}};
  }
  return json_body(200, o);
}

http::Response HttpApi::job_preview(const http::Request&, const std::string& id) {
  const auto job = find_job(id);
  const auto preview = job.preview();
  if (!preview) {
    // The job exists: 409 (as /video before the end), not 404, which would say it does not.
    if (!runtime_.previews(job.result().spec.model))
      return http::error_response(409, "not_ready", "job '" + id + "' has no preview: previews are off for its model "
                                                    "(preview_every is 0, or its package has no preview factors)");
    return http::error_response(409, "not_ready", "job '" + id + "' has no preview yet (one comes every " +
                                                      std::to_string(runtime_.config().preview_every.value_or(0)) + " steps while it denoises)");
  }
  http::StringResponse res{bhttp::status::ok, 11};
  res.set(bhttp::field::content_type, preview->content_type);
  res.set(bhttp::field::cache_control, "no-store");
  res.set("X-Vgen-Preview-Step", std::to_string(preview->step) + "/" + std::to_string(preview->total));
  res.body() = preview->bytes;
  return res;
}

http::Response HttpApi::page(const http::Request&, const std::string&) { return web_file(web_dir_, "index.html"); }

http::Response HttpApi::page_file(const http::Request&, const std::string& name) { return web_file(web_dir_, name); }

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
  if (http::wants_live(std::string_view(request.target())))
    if (auto live = http::live_video_response(runtime_, job)) return std::move(*live);
  const auto r = job.result();
  if (!job.finished())
    return http::error_response(409, "not_ready", "job '" + id + "' has not finished (status: " +
                                                      std::string(status_name(r.state, r.stage)) + ")");
  if (r.state != JobState::done)
    return http::error_response(409, "not_ready", "job '" + id + "' ended " + std::string(to_string(r.state)) +
                                                      (r.error.empty() ? "" : ": " + r.error) + "; it has no video");
  if (std::filesystem::is_directory(r.output))
    return http::error_response(409, "not_ready", "job '" + id + "' wrote a frame directory (format png), not a video file");
  return http::file_response(request, r.output, r.content_type);
}

http::Response HttpApi::cancel_job(const http::Request&, const std::string& id) {
  auto job = find_job(id);
  const bool requested = cancel_by_client(job, "cancelled by DELETE " + job_path(id));
  return json_body(requested ? 202 : 200, status_json(job, job.result()));
}

http::Response HttpApi::metrics(const http::Request&, const std::string&) {
  http::StringResponse res{bhttp::status::ok, 11};
  res.set(bhttp::field::content_type, "text/plain; version=0.0.4");
  res.body() = runtime_.metrics_text();
  return res;
}

http::Response HttpApi::trace(const http::Request& request, const std::string&) {
  const auto seconds = trace_seconds(std::string_view(request.target()));  // 400 before anything is recorded
  http::StreamResponse s;
  s.head.result(bhttp::status::ok);
  s.head.set(bhttp::field::content_type, "application/json");
  s.head.set(bhttp::field::cache_control, "no-cache");
  s.produce = [tracer = &runtime_.tracer(), seconds](http::StreamWriter& out) { return stream_trace(*tracer, seconds, out); };
  return s;
}

http::Response HttpApi::loras(const http::Request&, const std::string&) {
  json::array data;
  for (const auto& f : list_lora_files(runtime_.config().loras.dir))
    data.push_back(json::object{{"name", f.name}, {"bytes", f.bytes}});
  return json_body(200, {{"object", "list"}, {"data", std::move(data)}});
}

http::Response HttpApi::health(const http::Request&, const std::string&) {
  return http::json_response(200, R"({"status":"ok"})");
}

// In kRoutes' order (the anonymous table cannot name private members).
HttpApi::Handler HttpApi::handler_at(std::size_t i) {
  static constexpr Handler handlers[] = {&HttpApi::submit_job, &HttpApi::list_jobs,   &HttpApi::job_status,
                                         &HttpApi::cancel_job, &HttpApi::job_events,  &HttpApi::job_video,
                                         &HttpApi::job_preview, &HttpApi::metrics,    &HttpApi::health,
                                         &HttpApi::page,       &HttpApi::page_file,  &HttpApi::trace,
                                         &HttpApi::loras};
  static_assert(std::size(handlers) == std::size(kRoutes));
  return handlers[i];
}

}  // namespace vgen
