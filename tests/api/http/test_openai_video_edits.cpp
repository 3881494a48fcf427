// The video-in routes' request reading, the remix spec, and their refusals before any job is
// submitted (the submit hook here fails the case if called). End to end, through the official
// `openai` SDK against `vgen serve`: tests/python/test_openai_video_edits.py.
#include "api/http/openai_video_edits.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <boost/json/parse.hpp>

#include <filesystem>

using namespace vgen;
namespace bhttp = boost::beast::http;
namespace json = boost::json;

namespace {

http::Request multipart_request(const std::string& target, const std::vector<std::tuple<std::string, std::string, bool>>& parts) {
  http::Request r{bhttp::verb::post, target, 11};
  r.set(bhttp::field::content_type, "multipart/form-data; boundary=XyZ");
  std::string body;
  for (const auto& [name, value, file] : parts)
    body += "--XyZ\r\nContent-Disposition: form-data; name=\"" + name + "\"" + (file ? "; filename=\"a.mp4\"" : "") + "\r\n\r\n" + value + "\r\n";
  r.body() = body + "--XyZ--\r\n";
  r.prepare_payload();
  return r;
}

http::Request json_request(const std::string& target, const std::string& body) {
  http::Request r{bhttp::verb::post, target, 11};
  r.set(bhttp::field::content_type, "application/json");
  r.body() = body;
  r.prepare_payload();
  return r;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

json::object error_of(const http::Response& response, unsigned& status) {
  const auto& res = std::get<http::StringResponse>(response);
  status = res.result_int();
  return json::parse(res.body()).as_object().at("error").as_object();
}

// A service with one text-to-video model, a finished video "done" and a queued one "queued".
OpenAiVideoEdits::Context context(bool& submitted) {
  OpenAiVideoEdits::Context c;
  c.served = [] { return std::vector<ServedModel>{{"t2v", {}, {}}}; };
  c.facts = [](const std::string& id) -> std::optional<openai::VideoFacts> {
    if (id != "done" && id != "queued") return std::nullopt;
    openai::VideoFacts v;
    v.id = id;
    v.status = id == "done" ? "completed" : "queued";
    return v;
  };
  c.finished = [](const std::string&) { return std::optional<OpenAiVideoEdits::Finished>{}; };
  c.submit = [&submitted](json::value, std::vector<std::pair<std::string, std::string>>) -> JobHandle {
    submitted = true;
    throw_error(ErrorKind::internal, "not in this test");
  };
  c.describe = [](const JobHandle&) { return openai::VideoFacts{}; };
  return c;
}

}  // namespace

TEST_CASE("read_video_request: a file part, a video[id] field or a JSON {id}; exactly one") {
  auto r = openai::read_video_request(multipart_request("/v1/videos/edits", {{"prompt", "p", false}, {"video", "BYTES", true}, {"strength", "0.5", false}}), 1 << 20);
  CHECK(r.video_bytes == "BYTES");
  CHECK(r.video_id.empty());
  CHECK(r.text_fields);
  CHECK(r.fields.at("strength").as_string() == "0.5");
  CHECK_FALSE(r.fields.contains("video"));

  r = openai::read_video_request(multipart_request("/v1/videos/edits", {{"prompt", "p", false}, {"video[id]", "abc", false}}), 1 << 20);
  CHECK(r.video_id == "abc");
  r = openai::read_video_request(json_request("/v1/videos/edits", R"({"prompt": "p", "video": {"id": "abc"}, "seed": 3})"), 1 << 20);
  CHECK(r.video_id == "abc");
  CHECK_FALSE(r.text_fields);
  CHECK(r.fields.at("seed").as_int64() == 3);

  CHECK(message_of([] { openai::read_video_request(json_request("/", R"({"prompt": "p"})"), 1 << 20); }).starts_with("video: required"));
  CHECK(message_of([] { openai::read_video_request(json_request("/", R"({"prompt": "p", "video": "AAAA"})"), 1 << 20); })
            .starts_with("video: in a JSON body must be"));
  CHECK(message_of([] { openai::read_video_request(json_request("/", R"({"video": {"id": 7}})"), 1 << 20); }).starts_with("video: "));
  CHECK(message_of([] {
          openai::read_video_request(multipart_request("/", {{"video", "B", true}, {"video[id]", "abc", false}}), 1 << 20);
        }).starts_with("video: given twice"));
  CHECK(message_of([] { openai::read_video_request(multipart_request("/", {{"video", "0123456789", true}}), 9); })
            == "video: larger than 9 bytes (got 10)");
  CHECK(message_of([] { openai::read_video_request(json_request("/", "[1]"), 1 << 20); }).starts_with("request body: "));
}

TEST_CASE("remix_spec: the original less its inputs and name, the new prompt, vgen's own overrides") {
  JobSpec source;
  source.prompt = "old";
  source.model = "v2v";
  source.width = 48, source.height = 32, source.frames = 9, source.seed = 7, source.steps = 3;
  source.name = "clip";
  source.video = "/out/uploads/x.mp4", source.video_sha256 = "ab", source.strength = 0.3;
  source.image = "/out/uploads/y.png", source.image_sha256 = "cd";
  auto spec = openai::remix_spec(source, "new", json::object{{"steps", 4}});
  CHECK(spec.at("prompt").as_string() == "new");
  CHECK(spec.at("model").as_string() == "v2v");
  CHECK(spec.at("width").as_int64() == 48);
  CHECK(spec.at("frames").as_int64() == 9);
  CHECK(spec.at("seed").as_uint64() == 7);
  CHECK(spec.at("steps").as_int64() == 4);
  for (const char* gone : {"name", "image", "image_sha256", "video", "video_sha256", "strength", "extend"}) CHECK_FALSE(spec.contains(gone));
  CHECK(message_of([&] { openai::remix_spec(source, "new", {{"size", "64x64"}}); }).starts_with("size: a remix keeps"));
  CHECK(message_of([&] { openai::remix_spec(source, "new", {{"model", "x"}}); }).starts_with("model: a remix keeps"));
  CHECK(message_of([&] { openai::remix_spec(source, "new", {{"colour", "red"}}); }).starts_with("colour: unknown parameter"));
}

TEST_CASE("refusals before a job: unknown and unfinished sources, no video, another content type") {
  const test::TempDir tmp("vgen-openai-edits-");  // its own per run: ctest -j and repeated runs never share it
  const auto& dir = tmp.path();
  bool submitted = false;
  OpenAiVideoEdits edits(dir, 1 << 20, context(submitted));
  unsigned status = 0;

  auto e = error_of(edits.edit(json_request("/v1/videos/edits", R"({"prompt": "p", "video": {"id": "nope"}})")), status);
  CHECK(status == 404);
  CHECK(e.at("param").as_string() == "video");
  e = error_of(edits.extend(json_request("/v1/videos/extensions", R"({"prompt": "p", "seconds": "1", "video": {"id": "queued"}})")), status);
  CHECK(status == 409);
  CHECK(e.at("code").as_string() == "video_not_ready");
  CHECK(e.at("param").as_string() == "video");
  e = error_of(edits.edit(multipart_request("/v1/videos/edits", {{"prompt", "p", false}})), status);
  CHECK(status == 400);
  CHECK(e.at("param").as_string() == "video");
  e = error_of(edits.extend(multipart_request("/v1/videos/extensions", {{"prompt", "p", false}, {"video", "B", true}})), status);
  CHECK(status == 400);
  CHECK(e.at("param").as_string() == "seconds");

  e = error_of(edits.remix(json_request("/v1/videos/nope/remix", R"({"prompt": "p"})"), "nope"), status);
  CHECK(status == 404);
  CHECK(e.at("param").is_null());
  e = error_of(edits.remix(json_request("/v1/videos/queued/remix", R"({"prompt": "p"})"), "queued"), status);
  CHECK(status == 409);
  CHECK(e.at("code").as_string() == "video_not_ready");
  e = error_of(edits.remix(json_request("/v1/videos/done/remix", R"({})"), "done"), status);
  CHECK(status == 400);
  CHECK(e.at("param").as_string() == "prompt");

  http::Request text{bhttp::verb::post, "/v1/videos/edits", 11};
  text.set(bhttp::field::content_type, "text/plain");
  error_of(edits.edit(text), status);
  CHECK(status == 415);
  CHECK_FALSE(submitted);
  CHECK(edits.remixed_from("done").empty());
}
