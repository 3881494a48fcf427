#include "stages/job_spec.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include "runtime/errors.hpp"

using namespace vgen;
namespace json = boost::json;

namespace {

// The message of the invalid_argument error parsing `text` raises ("" if none).
std::string error_of(const std::string& text) {
  try {
    parse_job_spec(json::parse(text), JobSpec{}, SpecLimits{});
    return "";
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
}

}  // namespace

TEST_CASE("a valid job keeps defaults for absent fields") {
  JobSpec defaults;
  defaults.steps = 30;
  auto s = parse_job_spec(json::parse(R"({"prompt":"a red circle moving left","width":320,"seed":7,"frames":33})"),
                          defaults, SpecLimits{});
  CHECK(s.prompt == "a red circle moving left");
  CHECK(s.width == 320);
  CHECK(s.height == 256);
  CHECK(s.frames == 33);
  CHECK(s.steps == 30);
  CHECK(s.seed == 7);
  CHECK(parse_job_spec(json::value_from(to_json(s)), JobSpec{}, SpecLimits{}).width == 320);  // round trip
}

TEST_CASE("every bad field is named in the error") {
  CHECK(error_of(R"({"prompt":""})").rfind("prompt:", 0) == 0);
  CHECK(error_of(R"({"prompt":"   "})").rfind("prompt:", 0) == 0);
  CHECK(error_of(R"({})").rfind("prompt:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","width":250})") == "width: must be a multiple of 16 (got 250)");
  CHECK(error_of(R"({"prompt":"x","height":100000})").rfind("height:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","frames":16})").rfind("frames: must be 4k+1", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","steps":0})").rfind("steps:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","steps":1e9})").rfind("steps:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","guidance":-1})").rfind("guidance:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","seed":-1})").rfind("seed:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","seed":18446744073709551615})").rfind("seed:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","fps":0})").rfind("fps:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","format":"avi"})").rfind("format: unknown 'avi'", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","width":"wide"})").rfind("width: must be an integer", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","colour":"red"})") == "colour: unknown field");
  CHECK(error_of(R"([1,2])").rfind("job:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","name":"../etc/passwd"})").rfind("name:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","name":"/abs"})").rfind("name:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","name":".."})").rfind("name:", 0) == 0);
  CHECK(error_of("{\"prompt\":\"" + std::string(5000, 'a') + "\"}").rfind("prompt: longer than", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","name":"clip-01.v2"})") == "");
}

TEST_CASE("invalid UTF-8 in a prompt is rejected") {
  json::object o;
  o["prompt"] = std::string("bad \xff bytes");
  try {
    parse_job_spec(o, JobSpec{}, SpecLimits{});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "prompt: not valid UTF-8");
  }
}
