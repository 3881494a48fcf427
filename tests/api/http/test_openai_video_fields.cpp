// The OpenAI mapping of /v1/videos: size and seconds onto a model's frames, vgen's own fields
// passed through (typed when they come as multipart text), the video object's fields, and
// errors in OpenAI's envelope naming the request's field.
#include "api/http/openai_video_fields.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <functional>

namespace json = boost::json;
using namespace vgen;

namespace {

ServedModel step4_model() {
  ServedModel m;
  m.name = "tiny";
  m.defaults.fps = 16;
  m.limits.frames_step = 4;
  m.limits.min_frames = 1;
  m.limits.max_frames = 81;
  return m;
}

std::string param_of_error(const std::function<void()>& f) {
  try {
    f();
  } catch (...) {
    const auto e = openai::api_error(std::current_exception());
    CHECK(e.status == 400);
    CHECK(e.type == "invalid_request_error");
    return e.param;
  }
  FAIL("no error");
  return {};
}

}  // namespace

TEST_CASE("seconds map onto frames_step * k + 1 frames at the model's fps, and read back") {
  const auto m = step4_model();
  CHECK(openai::frames_for("5", 16, m.limits) == 81);
  CHECK(openai::frames_for("4", 16, m.limits) == 65);
  CHECK(openai::frames_for("0.5", 16, m.limits) == 9);
  CHECK(openai::frames_for("0", 16, m.limits) == 1);
  CHECK(openai::seconds_text(81, 16) == "5");
  CHECK(openai::seconds_text(9, 16) == "0.5");
  CHECK(openai::seconds_text(19, 16) == "1.125");
  CHECK(openai::seconds_text(17, 3) == "5.333");
  CHECK(openai::seconds_text(1, 16) == "0");
  CHECK(param_of_error([&] { openai::frames_for("12", 16, m.limits); }) == "seconds");  // 193 frames > 81
  CHECK(param_of_error([&] { openai::frames_for("four", 16, m.limits); }) == "seconds");
  CHECK(param_of_error([&] { openai::frames_for("-1", 16, m.limits); }) == "seconds");
}

TEST_CASE("a create request becomes a job spec: size, seconds, model, and vgen's fields") {
  const auto m = step4_model();
  const json::object json_request{{"prompt", "a red ball"}, {"model", "tiny"}, {"size", "832x480"}, {"seconds", "4"},
                                  {"steps", 3}, {"seed", 7}, {"loras", json::array{json::object{{"name", "a"}}}}};
  const auto spec = openai::job_spec_from(json_request, m, false);
  CHECK(spec.at("prompt") == "a red ball");
  CHECK(spec.at("model") == "tiny");
  CHECK(spec.at("width") == 832);
  CHECK(spec.at("height") == 480);
  CHECK(spec.at("frames") == 65);
  CHECK(spec.at("steps") == 3);
  CHECK(spec.at("seed") == 7);
  CHECK(spec.at("loras").as_array().size() == 1);
  CHECK_FALSE(spec.contains("size"));
  CHECK_FALSE(spec.contains("seconds"));

  // Multipart: every value is text, typed here; loras come as JSON text; fps changes seconds' frames.
  const json::object form{{"prompt", "p"}, {"seconds", "1"}, {"steps", "2"}, {"guidance", "1.5"}, {"seed", "18446744073709551615"},
                          {"priority", "-3"}, {"negative_prompt", "blur"}, {"loras", R"([{"name":"a","scale":0.5}])"}, {"fps", "8"}};
  const auto typed = openai::job_spec_from(form, m, true);
  CHECK(typed.at("steps").is_int64());
  CHECK(typed.at("guidance") == 1.5);
  CHECK(typed.at("seed").as_uint64() == 18446744073709551615ull);
  CHECK(typed.at("priority") == -3);
  CHECK(typed.at("negative_prompt") == "blur");
  CHECK(typed.at("loras").as_array().at(0).at("scale") == 0.5);
  CHECK(typed.at("frames") == 9);  // 1 s at 8 fps: 8 frames, + 1
  CHECK(typed.at("fps") == 8.0);

  CHECK(param_of_error([&] { openai::job_spec_from({{"prompt", "p"}, {"sizes", "1x1"}}, m, false); }) == "sizes");
  CHECK(param_of_error([&] { openai::job_spec_from({{"prompt", "p"}, {"size", "832*480"}}, m, false); }) == "size");
  CHECK(param_of_error([&] { openai::job_spec_from({{"prompt", "p"}, {"steps", "many"}}, m, true); }) == "steps");
  CHECK(param_of_error([&] { openai::job_spec_from({{"prompt", "p"}, {"loras", "[{"}}, m, true); }) == "loras");
  CHECK(param_of_error([&] { openai::job_spec_from({{"size", "16x16"}}, m, false); }) == "prompt");
}

TEST_CASE("vgen's field errors name OpenAI's fields; the envelope is OpenAI's") {
  const auto param = [](const char* message) {
    return openai::api_error(std::make_exception_ptr(Error(ErrorKind::invalid_argument, message))).param;
  };
  CHECK(param("width: must be a multiple of 16 (got 250)") == "size");
  CHECK(param("height: must be at most 1920") == "size");
  CHECK(param("frames: must be 4k+1") == "seconds");
  CHECK(param("image: required by model 'x'") == "input_reference");
  CHECK(param("steps: must be in [1, 1000]") == "steps");
  CHECK(param("request body is not valid JSON: x") == "");

  const auto missing = openai::api_error(std::make_exception_ptr(Error(ErrorKind::not_found, "video 'x' not found")));
  CHECK(missing.status == 404);
  CHECK(missing.param.empty());
  const auto res = openai::error_response(openai::api_error(std::make_exception_ptr(Error(ErrorKind::invalid_argument, "steps: bad"))));
  CHECK(res.result_int() == 400);
  const auto body = json::parse(res.body());
  const auto& error = body.at("error").as_object();
  CHECK(error.at("message") == "steps: bad");
  CHECK(error.at("type") == "invalid_request_error");
  CHECK(error.at("param") == "steps");
  CHECK(error.at("code") == "invalid_argument");
  const auto overloaded = openai::error_response(openai::api_error(std::make_exception_ptr(Error(ErrorKind::overloaded, "full"))));
  CHECK(overloaded.result_int() == 429);
  CHECK(overloaded.count(boost::beast::http::field::retry_after) == 1);
  CHECK(json::parse(overloaded.body()).at("error").at("param").is_null());
}

TEST_CASE("a video object carries the fields the SDK reads, by status") {
  CHECK(openai::status_of("queued") == "queued");
  CHECK(openai::status_of("interrupted") == "queued");
  CHECK(openai::status_of("running") == "in_progress");
  CHECK(openai::status_of("denoise") == "in_progress");
  CHECK(openai::status_of("done") == "completed");
  CHECK(openai::status_of("failed") == "failed");
  CHECK(openai::status_of("cancelled") == "failed");

  openai::VideoFacts v;
  v.id = "0193b5d6-8a1c-7f3e-9b2a-4c5d6e7f8091";
  v.model = "tiny";
  v.prompt = "p";
  v.status = "in_progress";
  v.progress = 40;
  v.created_at = 1700000000;
  v.width = 832, v.height = 480, v.frames = 81, v.fps = 16;
  auto o = openai::video_json(v);
  CHECK(o.at("object") == "video");
  CHECK(o.at("size") == "832x480");
  CHECK(o.at("seconds") == "5");
  CHECK(o.at("progress") == 40);
  CHECK(o.at("completed_at").is_null());
  CHECK(o.at("expires_at").is_null());
  CHECK(o.at("error").is_null());
  v.status = "failed";
  v.completed_at = 1700000010;
  v.error_code = "cancelled";
  v.error_message = "deleted";
  o = openai::video_json(v);
  CHECK(o.at("completed_at") == 1700000010);
  CHECK(o.at("error").at("code") == "cancelled");
  CHECK(o.at("error").at("message") == "deleted");
}

