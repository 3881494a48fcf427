// OpenAiVideos: OpenAI's videos API over a JobService, as the official `openai` SDK calls it
// (client.videos.create / retrieve / list / delete / download_content, client.models.list).
// HttpApi hands it every request under /v1/videos and /v1/models.
//
//   POST   /v1/videos               create: JSON, or multipart/form-data (what the SDK sends) with the
//                                   image of an image-to-video job in an "input_reference" file part
//   GET    /v1/videos               list: ?after=<video id> &limit=1..100 (20) &order=desc|asc (desc)
//   GET    /v1/videos/{id}          retrieve
//   DELETE /v1/videos/{id}          delete: cancels the job if it runs, removes its video and stills;
//                                   afterwards both APIs answer 404 for it (remembered across restarts)
//   GET    /v1/videos/{id}/content  ?variant=video (default) | thumbnail (PNG) | spritesheet (JPEG);
//                                   409 until the job is completed
//   GET    /v1/models               the served packages
//   POST   /v1/videos/edits, /v1/videos/{id}/remix, /v1/videos/extensions: a video in
//                                   (api/http/openai_video_edits.hpp)
//
// Mapping (api/http/openai_video_fields.hpp): "size" "WxH" -> width, height; "seconds" -> frames through
// the package's fps: frames = frames_step * round(seconds * fps / frames_step) + 1 (81 frames at
// 16 fps read "5"); vgen's own fields pass through as extra body fields (steps, guidance, seed,
// negative_prompt, loras, priority, step_cache, precision, scheduler, shift, fps, format). Status:
// queued (and a resumable interrupted job) -> queued, running -> in_progress, done -> completed,
// failed and cancelled -> failed with error.code the vgen error kind ("cancelled"). A video is
// a vgen job: the same id under /v1/jobs/{id}.
// Errors: OpenAI's envelope {"error": {"message", "type", "param", "code"}}, param naming the
// request field (a vgen field error on "width" reads param "size", "frames" reads "seconds").
//
// Stills are made on the first request for them (stages/media/stills.hpp) and cached beside the
// video as <stem>.thumbnail.png and <stem>.spritesheet.jpg (remade when the video is newer).
// Threads: handle() never blocks an io thread: create and delete run on the `blocking`
// executor given (HttpApi's uploads thread: decode, write, fsync), stills on this object's own
// thread. Every member is safe to call from any thread (the deleted ids behind a mutex).
// Cancellation: a request's work, once on another thread, runs to its end even if the client
// goes. Lifetime: the JobService outlives this; jobs' watchers hold only shared state.
#pragma once

#include "api/job_service.hpp"
#include "api/engine.hpp"
#include "api/http/http_response.hpp"
#include "api/http/openai_video_edits.hpp"
#include "api/http/openai_video_fields.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vgen {


class OpenAiVideos {
 public:
  // How HttpApi lets the videos routes share its uploads: submit a spec with image bytes by
  // field (stored, pinned, released when the job ends) and cancel a job as DELETE /v1/jobs does.
  struct Hooks {
    std::function<JobHandle(boost::json::value spec, std::vector<std::pair<std::string, std::string>> images)> submit;
    std::function<void(JobHandle& job, std::string reason)> cancel;
  };
  // Reads the deleted ids from <output_dir>/.vgen-videos-deleted.
  OpenAiVideos(JobService& jobs, Hooks hooks, boost::asio::any_io_executor blocking);
  ~OpenAiVideos();
  OpenAiVideos(const OpenAiVideos&) = delete;
  OpenAiVideos& operator=(const OpenAiVideos&) = delete;

  // {method, OpenAPI path template}, in the order handle() matches them.
  static std::vector<std::pair<std::string, std::string>> routes();
  static bool serves(std::string_view path);  // under /v1/videos or /v1/models
  // Checks the bearer token, then answers (404/405 in OpenAI's envelope off the routes).
  boost::asio::awaitable<http::Response> handle(http::Request request);
  // Whether DELETE /v1/videos removed this job (HttpApi then answers 404 for it as well).
  bool deleted(std::string_view id) const;

 private:
  struct Deleted;
  http::Response dispatch(const http::Request& request, std::string_view path);
  http::Response create(const http::Request& request);
  http::Response list(const http::Request& request);
  http::Response retrieve(const std::string& id);
  http::Response remove(const std::string& id);
  http::Response content(const http::Request& request, const std::string& id);
  http::Response models();

  std::vector<ServedModel> served() const;  // served_models(), or the config's names
  const ServedModel& model_named(const std::vector<ServedModel>& served, std::string_view name) const;
  std::optional<openai::VideoFacts> facts(const std::string& id) const;
  std::optional<JobRecord> find_record(const std::string& id) const;  // a job no longer in memory
  JobSpec spec_of(const JobRecord& record) const;  // validated, or what the record says
  openai::VideoFacts facts_of(const JobRecord& record) const;
  // `submitted`: the spec the job was submitted with, where the job carries none (a fleet front end's).
  openai::VideoFacts facts_of(const JobHandle& job, const JobSpec* submitted = nullptr) const;

  JobService& jobs_;
  Hooks hooks_;
  boost::asio::any_io_executor blocking_;
  std::shared_ptr<Deleted> deleted_;
  std::unique_ptr<OpenAiVideoEdits> edits_;
  boost::asio::thread_pool stills_{1};
};

}  // namespace vgen
