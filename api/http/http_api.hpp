// HttpApi: the vgen HTTP routes over a JobService (a vgen::Runtime, or the fleet's
// FleetClient for `vgen serve --queue`), as a RequestHandler for HttpServer.
//
//   POST   /v1/jobs              submit a job spec (JSON) -> 202 {id, status, links} + Location;
//                                image jobs: "image"/"last_image" as base64 or data URLs in the
//                                JSON, or multipart/form-data with the spec in a "spec" part and
//                                the files in "image"/"last_image" parts (api/http/uploads.hpp)
//   GET    /v1/jobs              the jobs the job store records, newest first: ?status= &limit=
//                                (1..200, default 20) &cursor= (the previous page's next_cursor)
//   GET    /v1/jobs/{id}         status: to_json(JobResult) plus live progress
//   GET    /v1/jobs/{id}/events  Server-Sent Events: `progress` per job event, `preview` per new
//                                preview image, then one final `done` | `failed` | `cancelled`
//                                event, then the stream ends
//   GET    /v1/jobs/{id}/preview the latest preview while it denoises (image/png; 409 if none yet)
//   GET    /v1/jobs/{id}/video   the output file (Range requests: 206 / 416; 409 until done);
//                                ?live=1 streams a running job's video as it is encoded
//                                (fragmented MP4, chunked: api/http/live_video.hpp)
//   DELETE /v1/jobs/{id}         cancel
//   GET    /metrics              Prometheus text (Runtime::metrics_text)
//   GET    /healthz              {"status": "ok"}
//   GET    /v1/trace?seconds=N   the runtime's timeline for the next N seconds (1..60, default 5)
//                                as Chrome / Perfetto trace JSON (runtime/trace.hpp), sent when done
//   GET    /v1/loras             the LoRAs jobs may name: {"object": "list", "data": [{name, bytes}]}
//                                from the config's lora_dir (stages/model/lora_files.hpp; empty without)
//   GET    /  and  /ui/{name}    the page (api/http/web_page.hpp; files from web_dir, 404 without one)
//   /v1/videos..., /v1/models     OpenAI's videos API over the same jobs (api/http/openai_videos.hpp);
//                                a video deleted there answers 404 here too
// docs/openapi.json describes the same routes; tests/api/http/test_http_api.cpp keeps them in sync
// with routes().
//
// Errors: handlers throw vgen::Error; the server maps it once (error_response ->
// http_status_for): invalid_argument 400, not_found 404, overloaded 429 with Retry-After, ...
// Protocol errors (401, 405 with Allow, 409, 415) use the same JSON error body.
// Auth: when config().service.token is set, every route but /healthz and the page's files needs
// "Authorization: Bearer <token>" (401 otherwise), checked before routing by
// http::bearer_authorized (api/http/http_auth: the scheme in any letter case, constant-time compare).
// Threads: handle() never blocks an io thread (submission uses Runtime::try_submit); a
// submission that carries images (decode, fsync'd write, admission's decode), and GET /v1/loras
// (a directory scan with a stat per file), run on the HttpApi's own "uploads" thread and resume
// on the connection's strand. Its mutable state (the
// upload pins, the jobs cancelled by DELETE) is behind mutexes, so concurrent calls from
// different connections are safe.
// Uploads: kept in <output_dir>/uploads while an unfinished job uses them, removed when the
// last such job is done, failed or cancelled by DELETE (a job cancelled by a graceful stop
// keeps its files: it resumes). Constructing an HttpApi pins the images of the Runtime's
// unfinished (resumed) jobs and removes every other upload. Job events arrive on worker
// threads and reach the event stream through a BoundedChannel; a client too slow to take
// them misses progress events, never the final one.
// Lifetime: the JobService must outlive the HttpApi and every stream it started (stop and join
// the server before destroying the Runtime).
#pragma once

#include "api/engine.hpp"
#include "api/http/http_server.hpp"
#include "api/http/openai_videos.hpp"
#include "api/http/uploads.hpp"

#include <boost/asio/thread_pool.hpp>

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace vgen {

class HttpApi : public http::RequestHandler {
 public:
  // web_dir: the page's files (api/http/web_page.hpp default_web_dir()); empty: no page.
  explicit HttpApi(JobService& jobs, std::filesystem::path web_dir = {});
  ~HttpApi() override;

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
  http::Response list_jobs(const http::Request& request, const std::string& id);
  http::Response job_status(const http::Request& request, const std::string& id);
  http::Response job_preview(const http::Request& request, const std::string& id);
  http::Response page(const http::Request& request, const std::string& id);
  http::Response page_file(const http::Request& request, const std::string& name);
  http::Response job_events(const http::Request& request, const std::string& id);
  http::Response job_video(const http::Request& request, const std::string& id);
  http::Response cancel_job(const http::Request& request, const std::string& id);
  http::Response metrics(const http::Request& request, const std::string& id);
  http::Response health(const http::Request& request, const std::string& id);
  http::Response trace(const http::Request& request, const std::string& id);
  http::Response loras(const http::Request& request, const std::string& id);

  JobHandle find_job(const std::string& id) const;  // Error(not_found)
  // Stores `images` (by field) as uploads, puts their paths into `spec`, submits; nothing stays
  // written when it is refused. Shared by POST /v1/jobs and POST /v1/videos.
  JobHandle submit_spec(boost::json::value spec, UploadBytes images);
  bool cancel_by_client(JobHandle& job, std::string reason);  // JobHandle::cancel; its uploads go when it ends
  // Unpins `files` once `job` ends (unless a graceful stop cancelled it: it resumes).
  void release_when_finished(const JobHandle& job, std::vector<std::filesystem::path> files);

  struct Cancels {  // jobs a client cancelled by DELETE (their uploads go)
    std::mutex mutex;
    std::set<std::string> ids;
  };

  JobService& runtime_;  // whoever runs the jobs: a Runtime, or the fleet's FleetClient
  std::shared_ptr<UploadStore> uploads_;
  std::shared_ptr<Cancels> cancels_ = std::make_shared<Cancels>();
  boost::asio::thread_pool upload_thread_{1};
  std::filesystem::path web_dir_;
  std::unique_ptr<OpenAiVideos> videos_;  // after upload_thread_: it runs create and delete there
};

}  // namespace vgen
