// OpenAiVideoEdits: the routes of OpenAI's videos API that start from a video (issue 34 item 5),
// as the official `openai` SDK calls them. OpenAiVideos matches the paths and hands these over.
//
//   POST /v1/videos/edits        client.videos.edit(prompt=, video=): a video-to-video job on the
//                                video, a "video" file part (multipart, what the SDK sends) or a
//                                finished video by id (JSON {"video": {"id": ...}}, or a
//                                "video[id]" form field). Extra body: model, size, seconds,
//                                strength (vgen's default, 0.8 as diffusers'), and vgen's own
//                                fields as for create. Default model: the one named, else the
//                                source video's if it takes a video, else the first served
//                                model that takes one; a model without video input is a 400
//                                naming `video`. Size and seconds default to the source video's
//                                (by id) or the model's (an upload; the output has at most the
//                                upload's frames).
//   POST /v1/videos/{id}/remix   client.videos.remix(id, prompt=): the finished video again with
//                                a new prompt. It keeps the original's model, size, seconds,
//                                seed and settings (extra body may override vgen's own fields,
//                                not the model, size or seconds). On a model that takes a video,
//                                the new job is video-to-video on the original's output at
//                                strength kRemixStrength (0.6; extra body "strength" overrides);
//                                else it renders the original's spec with the new prompt and
//                                the same seed (the same prompt gives the same bytes), with the
//                                original's uploaded image or clip if the uploads folder still
//                                holds it (409 "input_gone" when not). The video object says
//                                `remixed_from_video_id` (kept in <output_dir>/.vgen-videos-remixed,
//                                api/http/remix_log: one appended line a remix).
//   POST /v1/videos/extensions   client.videos.extend(prompt=, seconds=, video=): an extend job
//                                (JobSpec extend, stages/media/clip_extension) on an upload or a
//                                finished video by id; `seconds` is the new segment's length:
//                                frames = frames_step * round(seconds * fps / frames_step) + 1,
//                                of which frames - 1 are added, at the source's fps (by id) or
//                                the request's `fps`, else the model's. Default model: the one
//                                named, else the source's if it takes an image, else the first
//                                served model that takes one; one that takes no image is a 400
//                                naming `model`.
// A source video by id: 404 (param `video`) when unknown or deleted, 409 video_not_ready before
// it is completed, 409 no_video_file when it was written as PNG frames. Its file is copied into
// the uploads folder like an upload (pinned while the job runs), so deleting the source does not
// break the job. Errors: OpenAI's envelope naming the request field.
//
// Threads: edit/remix/extend block (read files, decode the video to check it, fsync): call them
// off the io threads (OpenAiVideos runs POSTs on its blocking executor), and so are the
// constructor and forget() (they may rewrite the remix log). remixed_from() is safe from any
// thread (a mutex) and does no I/O. Cancellation: none; a request runs to its end.
// Lifetime: the Context's functions must stay callable while this lives.
#pragma once

#include "api/engine.hpp"
#include "api/http/http_response.hpp"
#include "api/http/openai_video_fields.hpp"
#include "api/http/remix_log.hpp"
#include "api/job_service.hpp"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vgen {

namespace openai {

// An edit or extend request's fields, and where its video comes from (exactly one of the two).
struct VideoRequest {
  boost::json::object fields;  // every other field, as sent
  bool text_fields = false;    // multipart: every value is text
  std::string video_id;        // a finished video by id
  std::string video_bytes;     // or an uploaded file
};
// Reads a multipart/form-data or JSON body (the caller checked the content type).
// Error(invalid_argument) naming "video": none, both, a file over max_video_bytes, a JSON video
// that is not {"id": <string>}.
VideoRequest read_video_request(const http::Request& request, std::uint64_t max_video_bytes);

// The spec of a remix: `source` (the original's admitted spec) with its inputs and name
// dropped, `prompt` set, and the overrides (vgen's own fields; "model", "size" and "seconds"
// are refused naming them, unknown fields too). Strength and inputs are the caller's.
boost::json::object remix_spec(const JobSpec& source, std::string_view prompt, const boost::json::object& overrides);

}  // namespace openai

class OpenAiVideoEdits {
 public:
  static constexpr double kRemixStrength = 0.6;

  // A completed job: its spec (as admitted, or as its record says) and its output file.
  struct Finished {
    JobSpec spec;
    std::filesystem::path output;
  };
  // What the videos API shares with these routes.
  struct Context {
    std::function<std::vector<ServedModel>()> served;  // the first is the default
    std::function<std::optional<openai::VideoFacts>(const std::string& id)> facts;  // nullopt: unknown or deleted
    std::function<std::optional<Finished>(const std::string& id)> finished;        // nullopt: unknown
    // Submits a spec with file bytes by field ("video", "image", "last_image"): stored as uploads.
    std::function<JobHandle(boost::json::value spec, std::vector<std::pair<std::string, std::string>> files)> submit;
    std::function<openai::VideoFacts(const JobHandle& job)> describe;
    // Whether a video is still there (not deleted, not expired from the job store); the remix
    // log drops the others when it is read. nullptr: all are.
    std::function<bool(const std::string& id)> exists;
  };

  // Reads the remix log from <output_dir>/.vgen-videos-remixed (Context::exists on each entry).
  OpenAiVideoEdits(const std::filesystem::path& output_dir, std::uint64_t max_video_bytes, Context context);

  // {method, OpenAPI path template} of the three routes.
  static std::vector<std::pair<std::string, std::string>> routes();

  http::Response edit(const http::Request& request);
  http::Response remix(const http::Request& request, const std::string& id);
  http::Response extend(const http::Request& request);

  // The video a remix was made from; empty for any other id.
  std::string remixed_from(std::string_view id) const;
  // Video `id` was deleted: its remix entry, if any, is dead.
  void forget(std::string_view id);

 private:
  // What edit and extend start from: the request read (415 unless JSON or multipart), its
  // source when it names a finished video, and the model (pick_model with `fits`, in `served`).
  struct VideoIn {
    openai::VideoRequest request;
    std::optional<Finished> source;
    std::vector<ServedModel> served;
    const ServedModel* model = nullptr;
  };
  VideoIn video_in(const http::Request& request, bool (*fits)(const ServedModel&)) const;
  Finished completed(const std::string& id, std::string_view param) const;
  std::string read_output(const Finished& source) const;
  http::Response answer(const JobHandle& job) const;

  std::uint64_t max_video_bytes_;
  Context context_;
  RemixLog remixes_;
};

}  // namespace vgen
