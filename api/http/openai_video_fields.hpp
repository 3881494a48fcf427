// The OpenAI videos API's fields against vgen's: a create request -> a job spec ("size" ->
// width, height; "seconds" -> frames through the model's fps and frame step; vgen's own fields
// passed through), a job -> a video object, and errors -> OpenAI's envelope naming the
// request's field. Used by api/http/openai_videos (the routes).
// Thread-safety: pure functions. Errors: Error(invalid_argument) naming the request field.
#pragma once

#include "api/http/http_response.hpp"
#include "api/job_service.hpp"

#include <boost/json/object.hpp>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

namespace vgen {

namespace openai {

// An error in OpenAI's shape: HTTP status, type ("invalid_request_error", "authentication_error",
// "server_error", ...), code (vgen's error kind, or a specific code), param (the request field).
struct ApiError {
  unsigned status = 400;
  std::string type, code, message, param;
};
ApiError api_error(const std::exception_ptr& error);  // vgen::Error and others, classified once
http::StringResponse error_response(const ApiError& error);

// The duration a clip of `frames` frames at `fps` reads as: (frames - 1) / fps, at most 3
// decimals, no trailing zeros ("5", "0.5").
std::string seconds_text(int frames, double fps);
// The frames for `seconds` (text, as the SDK sends it) on `model`; Error(invalid_argument)
// naming "seconds" for a bad number or a clip outside the model's frame limits.
int frames_for(std::string_view seconds, double fps, const SpecLimits& limits);

// A create request's fields -> a vgen job spec on `model`. `text_fields`: the values came as
// multipart text (numbers are parsed; "loras" is JSON text). Error(invalid_argument) naming
// the field for unknown or malformed fields. The image does not pass through here.
boost::json::object job_spec_from(const boost::json::object& request, const ServedModel& model, bool text_fields);

// What a video object says, from a live job or from the store's record of an older one.
struct VideoFacts {
  std::string id, model, prompt;
  std::string status;  // queued | in_progress | completed | failed
  int progress = 0;
  std::int64_t created_at = 0;
  std::optional<std::int64_t> completed_at, expires_at;
  int width = 0, height = 0, frames = 0;
  double fps = 16.0;
  std::string error_code, error_message;  // failed only
  std::string remixed_from;               // the source of a remix (POST /v1/videos/{id}/remix); empty: none
};
boost::json::object video_json(const VideoFacts& video);
// The OpenAI status of a vgen state name (queued, running, done, failed, cancelled, interrupted).
std::string_view status_of(std::string_view vgen_state);

}  // namespace openai

}  // namespace vgen
