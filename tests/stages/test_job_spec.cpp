#include "stages/job_spec.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include "runtime/errors.hpp"
#include "stages/text/tokenizer.hpp"  // is_valid_utf8

#include <cmath>
#include <limits>
#include <vector>

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

// The message of the invalid_argument error validate_job_spec raises for `spec` ("" if none).
std::string validation_error_of(const JobSpec& spec) {
  try {
    validate_job_spec(spec, SpecLimits{});
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

TEST_CASE("fps must be a playable rate: at least 1, at most 240") {
  // 1e-9 used to pass and fail later inside the encoder (a degenerate time base) as internal.
  CHECK(error_of(R"({"prompt":"x","fps":1e-9})") == "fps: must be between 1 and 240 (got 1e-09)");
  CHECK(error_of(R"({"prompt":"x","fps":0.5})").rfind("fps: must be between 1 and 240", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","fps":240.5})").rfind("fps:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","fps":-16})").rfind("fps:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","fps":1})") == "");
  CHECK(error_of(R"({"prompt":"x","fps":23.976})") == "");
  CHECK(error_of(R"({"prompt":"x","fps":240})") == "");
}

TEST_CASE("non-finite numbers never pass, from JSON or from code") {
  CHECK(error_of(R"({"prompt":"x","guidance":1e999})").rfind("guidance: must be a number", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","fps":-1e999})").rfind("fps: must be a number", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","steps":1e999})").rfind("steps: must be an integer", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","seed":1e999})").rfind("seed: must be an integer", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","width":2.5})").rfind("width: must be an integer", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","frames":-2147483648})").rfind("frames:", 0) == 0);
  CHECK(error_of(R"({"prompt":"x","height":4294967312})").rfind("height: out of range", 0) == 0);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (double g : {nan, inf, -inf}) {
    JobSpec s;
    s.prompt = "x";
    s.guidance = g;
    CHECK(validation_error_of(s).rfind("guidance:", 0) == 0);
  }
  for (double fps : {nan, inf, -inf, 1e-9}) {
    JobSpec s;
    s.prompt = "x";
    s.fps = fps;
    CHECK(validation_error_of(s).rfind("fps:", 0) == 0);
  }
}

TEST_CASE("limits that would divide by zero are an internal error, not SIGFPE") {
  JobSpec s;
  s.prompt = "x";
  SpecLimits l;
  l.size_multiple = 0;
  CHECK_THROWS_AS(validate_job_spec(s, l), Error);
  l = SpecLimits{};
  l.frames_step = 0;
  try {
    validate_job_spec(s, l);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::internal);
  }
}

TEST_CASE("messages that quote a long value cut it on a character boundary") {
  std::string accents;
  for (int i = 0; i < 60; ++i) accents += "\xC3\xA9";  // é, two bytes in UTF-8
  const std::vector<std::string> texts = {
      R"({"prompt":"x","width":")" + accents + R"("})",  // "width: must be an integer (got <40 bytes>...)"
      R"({"prompt":"x","name":"a)" + accents + R"("})",  // too long: the name is shown cut to 40 bytes
      R"({"prompt":"x","name":"clip-\u00e9"})"};         // the character it must not contain
  for (const auto& text : texts) {
    const auto message = error_of(text);
    CAPTURE(message);
    CHECK(!message.empty());
    CHECK(is_valid_utf8(message));
  }
  CHECK(error_of(R"({"prompt":"x","name":"clip-\u00e9"})") ==
        "name: must not contain '\xC3\xA9' (only [A-Za-z0-9._-]; no paths)");
}

namespace {

// The invalid_argument message parsing `text` raises under `limits` ("" if none).
std::string image_error_of(const std::string& text, const SpecLimits& limits) {
  try {
    parse_job_spec(json::parse(text), JobSpec{}, limits);
    return "";
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
}

const std::string kHash(64, 'a');

}  // namespace

TEST_CASE("image fields: what the package takes decides, and the error names the field and the model") {
  SpecLimits t2v;
  t2v.model_name = "wan-t2v";
  SpecLimits i2v;
  i2v.model_name = "wan-i2v";
  i2v.image = InputUse::required;
  SpecLimits flf2v = i2v;
  flf2v.last_image = InputUse::optional;

  CHECK(image_error_of(R"({"prompt":"p","image":"/in.png"})", t2v) == "image: model 'wan-t2v' does not take an image");
  CHECK(image_error_of(R"({"prompt":"p","image":"/in.png"})", SpecLimits{}) == "image: this model does not take an image");
  CHECK(image_error_of(R"({"prompt":"p"})", i2v) == "image: required by model 'wan-i2v'");
  CHECK(image_error_of(R"({"prompt":"p","image":"/a.png"})", i2v).empty());
  CHECK(image_error_of(R"({"prompt":"p","image":"/a.png","last_image":"/b.png"})", i2v) ==
        "last_image: model 'wan-i2v' does not take a last image");
  CHECK(image_error_of(R"({"prompt":"p","image":"/a.png","last_image":"/b.png"})", flf2v).empty());
  SpecLimits optional = flf2v;
  optional.image = InputUse::optional;
  CHECK(image_error_of(R"({"prompt":"p"})", optional).empty());
  CHECK(image_error_of(R"({"prompt":"p","last_image":"/b.png"})", optional).starts_with("last_image: needs image"));

  CHECK(image_error_of(R"({"prompt":"p","image":"in.png"})", i2v).starts_with("image: must be an absolute path"));
  CHECK(image_error_of(R"({"prompt":"p","image":""})", i2v) == "image: required by model 'wan-i2v'");
  CHECK(image_error_of(R"({"prompt":"p","image":7})", i2v).starts_with("image: must be a string"));
  CHECK(image_error_of(R"({"prompt":"p","image":"/a.png","image_sha256":"xyz"})", i2v).starts_with("image_sha256: must be 64"));
  CHECK(image_error_of(R"({"prompt":"p","image_sha256":")" + kHash + R"("})", optional).starts_with("image_sha256: given without image"));
  CHECK(image_error_of(R"({"prompt":"p","image":"/a\u0000.png"})", i2v).starts_with("image: path contains a NUL"));
  CHECK(parse_input_use("optional", "f") == InputUse::optional);
  CHECK_THROWS_AS(parse_input_use("maybe", "inputs.image"), Error);
}

TEST_CASE("image fields round-trip through to_json; the content key follows the bytes, not the path") {
  SpecLimits flf2v;
  flf2v.image = InputUse::required;
  flf2v.last_image = InputUse::optional;
  const auto s = parse_job_spec(json::parse(R"({"prompt":"p","image":"/up/a.png","image_sha256":")" + kHash +
                                            R"(","last_image":"/up/b.png","last_image_sha256":")" + std::string(64, 'b') + R"("})"),
                                JobSpec{}, flf2v);
  const auto back = parse_job_spec(json::value(to_json(s)), JobSpec{}, flf2v);
  CHECK(back.image == "/up/a.png");
  CHECK(back.image_sha256 == kHash);
  CHECK(back.last_image == "/up/b.png");
  CHECK(back.last_image_sha256 == std::string(64, 'b'));

  auto moved = s;
  moved.image = "/elsewhere/same-bytes.png";
  CHECK(job_content_key("m", moved) == job_content_key("m", s));
  auto other = s;
  other.image_sha256 = std::string(64, 'c');
  CHECK(job_content_key("m", other) != job_content_key("m", s));
  auto no_last = s;
  no_last.last_image.clear();
  no_last.last_image_sha256.clear();
  CHECK(job_content_key("m", no_last) != job_content_key("m", s));
  // Not admitted yet (no hash): two paths never share a key.
  auto a = s, b = s;
  a.image_sha256.clear();
  b.image_sha256.clear();
  b.image = "/b.png";
  CHECK(job_content_key("m", a) != job_content_key("m", b));
  // A text-to-video spec's JSON and key do not change with the new fields.
  JobSpec t2v;
  t2v.prompt = "p";
  CHECK_FALSE(to_json(t2v).contains("image"));
  CHECK_FALSE(to_json(t2v).contains("image_sha256"));
}

TEST_CASE("loras: names without paths, a scale in range, each once; the content key follows the files' hashes") {
  auto spec = parse_job_spec(json::parse(R"({"prompt":"p","loras":[{"name":"style_a","scale":0.8},{"name":"b"}]})"), JobSpec{},
                             SpecLimits{});
  REQUIRE(spec.loras.size() == 2);
  CHECK(spec.loras[0].name == "style_a");
  CHECK(spec.loras[0].scale == 0.8);
  CHECK(spec.loras[1].scale == 1.0);
  CHECK(error_of(R"({"prompt":"p","loras":{"name":"a"}})").find("loras: must be an array") == 0);
  CHECK(error_of(R"({"prompt":"p","loras":[{"name":"a/x"}]})").find("loras[0].name: must not contain '/'") == 0);
  CHECK(error_of(R"({"prompt":"p","loras":[{"scale":1}]})").find("loras[0].name: is required") == 0);
  CHECK(error_of(R"({"prompt":"p","loras":[{"name":"a","scale":11}]})").find("loras[0].scale: must be between -10 and 10") == 0);
  CHECK(error_of(R"({"prompt":"p","loras":[{"name":"a","path":"/x"}]})").find("loras[0].path: unknown field") == 0);
  CHECK(error_of(R"({"prompt":"p","loras":[{"name":"a"},{"name":"a"}]})").find("loras[1].name: 'a' is listed twice") == 0);
  // The JSON form round-trips; without LoRAs it has no "loras" key (older keys stay valid).
  CHECK(parse_job_spec(to_json(spec), JobSpec{}, SpecLimits{}).loras == spec.loras);
  JobSpec plain;
  plain.prompt = "p";
  CHECK(!to_json(plain).contains("loras"));
  auto a = spec, b = spec;
  a.loras[0].sha256 = "aa";
  b.loras[0].sha256 = "bb";
  CHECK(job_content_key("m", a).hex() != job_content_key("m", b).hex());  // same name, other file content
  auto c = a;
  c.loras[0].scale = 0.7;
  CHECK(job_content_key("m", a).hex() != job_content_key("m", c).hex());
  CHECK(job_content_key("m", plain).hex() != job_content_key("m", a).hex());
}

TEST_CASE("step_cache: a threshold in [0, 1], part of the content key only when on") {
  JobSpec base;
  base.prompt = "p";
  const auto spec = parse_job_spec(json::parse(R"({"prompt": "p", "step_cache": 0.1})"), base, SpecLimits{});
  CHECK(spec.step_cache == doctest::Approx(0.1));
  CHECK(error_of(R"({"prompt": "p", "step_cache": -0.5})").find("step_cache: must be between 0 (off) and 1") == 0);
  CHECK(error_of(R"({"prompt": "p", "step_cache": "fast"})").find("step_cache: must be a number") == 0);
  // Off (the default) keeps every existing key; on, the frames differ, so the key does too.
  CHECK_FALSE(to_json(base).contains("step_cache"));
  auto cached = base;
  cached.step_cache = 0.1;
  CHECK(job_content_key("m", cached).hex() != job_content_key("m", base).hex());
}

TEST_CASE("priority: an integer in [-100, 100], never part of the content key") {
  JobSpec base;
  base.prompt = "p";
  const auto spec = parse_job_spec(json::parse(R"({"prompt": "p", "priority": -7})"), base, SpecLimits{});
  CHECK(spec.priority == -7);
  CHECK(error_of(R"({"prompt": "p", "priority": 101})").find("priority: must be an integer between -100 and 100 (got 101)") == 0);
  CHECK(error_of(R"({"prompt": "p", "priority": -1000})").find("priority: must be an integer between -100 and 100") == 0);
  CHECK(error_of(R"({"prompt": "p", "priority": 1.5})").find("priority: ") == 0);
  CHECK(error_of(R"({"prompt": "p", "priority": "high"})").find("priority: ") == 0);
  CHECK_FALSE(to_json(base).contains("priority"));
  auto urgent = base;
  urgent.priority = 100;
  CHECK(to_json(urgent).at("priority").as_int64() == 100);
  CHECK(job_content_key("m", urgent).hex() == job_content_key("m", base).hex());  // the same video
}

TEST_CASE("precision: one the package carries, the default when absent; only a quantized one enters the key") {
  JobSpec defaults;
  defaults.prompt = "p";
  defaults.precision = "float32";
  SpecLimits limits;
  limits.precisions = {"float32", "int8"};
  limits.model_name = "tiny";
  CHECK(parse_job_spec(json::parse(R"({"prompt": "p"})"), defaults, limits).precision == "float32");
  const auto int8 = parse_job_spec(json::parse(R"({"prompt": "p", "precision": "int8"})"), defaults, limits);
  CHECK(int8.precision == "int8");
  auto error = [&](const std::string& text, const SpecLimits& l) {
    try {
      parse_job_spec(json::parse(text), defaults, l);
      return std::string();
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      return std::string(e.what());
    }
  };
  CHECK(error(R"({"prompt": "p", "precision": "int4"})", limits) ==
        "precision: unknown 'int4' (known: float32, float16, bfloat16, int8, fp8)");
  CHECK(error(R"({"prompt": "p", "precision": 8})", limits).find("precision: must be a string") == 0);
  CHECK(error(R"({"prompt": "p", "precision": "bfloat16"})", limits) ==
        "precision: model 'tiny' has no bfloat16 variant (it has: float32, int8)");
  auto float_only = limits;
  float_only.precisions = {"float32"};
  CHECK(error(R"({"prompt": "p", "precision": "int8"})", float_only) ==
        "precision: model 'tiny' has no int8 variant (it has: float32; export one with --quantize int8)");
  // A spec built in code for a package without a precisions list (tests, in-memory packages).
  auto named = defaults;
  named.precision = "int8";
  CHECK(validation_error_of(named) == "precision: this model has no int8 variant (it has only its own weights; export one with --quantize int8)");

  // The key: float32 is the package's own dtype (the model id names it), so float32 jobs keep
  // the keys they had before precisions existed; int8 renders another video.
  auto before = defaults;
  before.precision.clear();
  const auto f32 = parse_job_spec(json::parse(R"({"prompt": "p"})"), defaults, limits);
  CHECK(to_json(f32).at("precision").as_string() == "float32");  // echoed
  CHECK_FALSE(to_json(before).contains("precision"));
  CHECK(job_content_key("m", f32).hex() == job_content_key("m", before).hex());
  CHECK(job_content_key("m", int8).hex() != job_content_key("m", f32).hex());
  CHECK(parse_job_spec(json::value_from(to_json(int8)), defaults, limits).precision == "int8");  // round trip
  CHECK(is_quantized_precision("int8"));
  CHECK(is_quantized_precision("fp8"));
  CHECK_FALSE(is_quantized_precision("float32"));
}

TEST_CASE("precision_model_id: a float variant other than the package's own names itself; the base and quantized ones do not") {
  JobSpec s;
  s.prompt = "p";
  CHECK(precision_model_id("m", "float32", s) == "m");  // no precision: the package's default, as before
  s.precision = "float32";
  CHECK(precision_model_id("m", "float32", s) == "m");  // float32 jobs keep their keys
  s.precision = "int8";
  CHECK(precision_model_id("m", "float32", s) == "m");  // job_content_key keeps it in the spec
  s.precision = "bfloat16";
  CHECK(precision_model_id("m", "float32", s) == "m|precision:bfloat16");
  CHECK(precision_model_id("m", "bfloat16", s) == "m");  // a bf16 package's own weights
  auto f32 = s;
  f32.precision = "float32";
  CHECK(job_content_key(precision_model_id("m", "float32", s), s).hex() !=
        job_content_key(precision_model_id("m", "float32", f32), f32).hex());
}

TEST_CASE("precision fp8: a package's variant like int8, part of the content key") {
  JobSpec defaults;
  defaults.prompt = "p";
  defaults.precision = "float32";
  SpecLimits limits;
  limits.precisions = {"float32", "fp8"};
  const auto fp8 = parse_job_spec(json::parse(R"({"prompt": "p", "precision": "fp8"})"), defaults, limits);
  CHECK(fp8.precision == "fp8");
  const auto f32 = parse_job_spec(json::parse(R"({"prompt": "p"})"), defaults, limits);
  CHECK(job_content_key("m", fp8).hex() != job_content_key("m", f32).hex());  // another video
  limits.precisions = {"float32"};
  limits.model_name = "tiny";
  try {
    parse_job_spec(json::parse(R"({"prompt": "p", "precision": "fp8"})"), defaults, limits);
    FAIL("fp8 accepted by a package without the variant");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "precision: model 'tiny' has no fp8 variant (it has: float32; export one with --quantize fp8)");
  }

}

TEST_CASE("interpolate and upscale: 1 (off), 2 or 4; part of the content key only when on") {
  JobSpec base;
  base.prompt = "p";
  const auto spec = parse_job_spec(json::parse(R"({"prompt": "p", "interpolate": 4, "upscale": 2})"), base, SpecLimits{});
  CHECK(spec.interpolate == 4);
  CHECK(spec.upscale == 2);
  CHECK(error_of(R"({"prompt": "p", "interpolate": 3})").find("interpolate: must be 1 (off), 2 or 4 (got 3)") == 0);
  CHECK(error_of(R"({"prompt": "p", "upscale": 8})").find("upscale: must be 1 (off), 2 or 4 (got 8)") == 0);
  CHECK(error_of(R"({"prompt": "p", "upscale": "2"})").find("upscale: must be an integer") == 0);
  // 16 fps x 4 is fine; 120 x 4 is past the 240 fps a clip may have.
  CHECK(error_of(R"({"prompt": "p", "fps": 120, "interpolate": 4})").find("interpolate: fps 120 x 4 exceeds 240 fps") == 0);
  // Off keeps every existing key; each setting on gives another key.
  CHECK_FALSE(to_json(base).contains("interpolate"));
  CHECK_FALSE(to_json(base).contains("upscale"));
  auto one_off = base;
  one_off.interpolate = 1;
  CHECK(job_content_key("m", one_off).hex() == job_content_key("m", base).hex());
  auto a = base, b = base;
  a.interpolate = 2;
  b.upscale = 2;
  CHECK(job_content_key("m", a).hex() != job_content_key("m", base).hex());
  CHECK(job_content_key("m", b).hex() != job_content_key("m", base).hex());
  CHECK(job_content_key("m", a).hex() != job_content_key("m", b).hex());
}

TEST_CASE("video fields: taken only where the package says, strength in (0, 1] and only with a video") {
  SpecLimits t2v;
  t2v.model_name = "wan-t2v";
  SpecLimits v2v = t2v;
  v2v.video = InputUse::optional;
  SpecLimits needs = t2v;
  needs.video = InputUse::required;
  CHECK(image_error_of(R"({"prompt":"p","video":"/in.mp4"})", t2v) == "video: model 'wan-t2v' does not take a video");
  CHECK(image_error_of(R"({"prompt":"p"})", needs) == "video: required by model 'wan-t2v'");
  CHECK(image_error_of(R"({"prompt":"p","video":"/in.mp4"})", v2v).empty());
  CHECK(image_error_of(R"({"prompt":"p","video":"in.mp4"})", v2v).starts_with("video: must be an absolute path"));
  CHECK(image_error_of(R"({"prompt":"p","video":"/in.mp4","strength":0.5})", v2v).empty());
  CHECK(image_error_of(R"({"prompt":"p","video":"/in.mp4","strength":0})", v2v).starts_with("strength: must be above 0"));
  CHECK(image_error_of(R"({"prompt":"p","video":"/in.mp4","strength":1.5})", v2v).starts_with("strength: must be above 0"));
  CHECK(image_error_of(R"({"prompt":"p","strength":0.5})", v2v).starts_with("strength: needs video"));
  CHECK(image_error_of(R"({"prompt":"p","video_sha256":")" + kHash + R"("})", v2v).starts_with("video_sha256: given without video"));
}

TEST_CASE("the content key follows the input video's bytes and strength, not its path") {
  SpecLimits v2v;
  v2v.video = InputUse::optional;
  const auto s = parse_job_spec(
      json::parse(R"({"prompt":"p","video":"/up/a.mp4","strength":0.6,"video_sha256":")" + kHash + R"("})"), JobSpec{}, v2v);
  const auto back = parse_job_spec(json::value(to_json(s)), JobSpec{}, v2v);
  CHECK(back.video == "/up/a.mp4");
  CHECK(back.video_sha256 == kHash);
  CHECK(back.strength == 0.6);
  auto moved = s;
  moved.video = "/elsewhere/same-bytes.mp4";
  CHECK(job_content_key("m", moved) == job_content_key("m", s));
  auto other = s;  // another input video: another result
  other.video_sha256 = std::string(64, 'c');
  CHECK(job_content_key("m", other) != job_content_key("m", s));
  auto weaker = s;
  weaker.strength = 0.4;
  CHECK(job_content_key("m", weaker) != job_content_key("m", s));
  auto none = s;  // no video at all: the text-to-video key, whatever strength holds
  none.video.clear();
  none.video_sha256.clear();
  CHECK(job_content_key("m", none) != job_content_key("m", s));
  JobSpec t2v;
  t2v.prompt = "p";
  auto t2v_other_strength = t2v;
  t2v_other_strength.strength = 0.3;
  CHECK(job_content_key("m", t2v) == job_content_key("m", t2v_other_strength));
  CHECK_FALSE(to_json(t2v).contains("video"));
  CHECK_FALSE(to_json(t2v).contains("strength"));
}

TEST_CASE("extend: needs a video and a package that takes an image; refusals name the field") {
  SpecLimits t2v;
  t2v.model_name = "wan-t2v";
  SpecLimits i2v;
  i2v.model_name = "wan-i2v";
  i2v.image = InputUse::required;  // takes no video: an extend job's video is not the model's input
  const std::string video = R"("video":"/in.mp4")";
  CHECK(image_error_of(R"({"prompt":"p","extend":true,)" + video + "}", i2v).empty());
  CHECK(image_error_of(R"({"prompt":"p","extend":true})", i2v) == "extend: needs video (the clip to extend)");
  CHECK(image_error_of(R"({"prompt":"p","extend":true,)" + video + "}", t2v).starts_with("extend: model 'wan-t2v' takes no image"));
  CHECK(image_error_of(R"({"prompt":"p","extend":"yes",)" + video + "}", i2v).starts_with("extend: must be true or false"));
  CHECK(image_error_of(R"({"prompt":"p","extend":true,"image":"/a.png",)" + video + "}", i2v).starts_with("image: an extend job's first frame"));
  CHECK(image_error_of(R"({"prompt":"p","extend":true,"strength":0.5,)" + video + "}", i2v).starts_with("strength: not for an extend job"));
  CHECK(image_error_of(R"({"prompt":"p","extend":true,"frames":1,)" + video + "}", i2v).starts_with("frames: an extend job adds"));
  // Without extend, the same video is a video-to-video input this package does not take.
  CHECK(image_error_of(R"({"prompt":"p","image":"/a.png",)" + video + "}", i2v) == "video: model 'wan-i2v' does not take a video");
  CHECK(image_error_of(R"({"prompt":"p","extend":false,"image":"/a.png"})", i2v).empty());
}

TEST_CASE("extend: in the content key with the video's bytes, strength left out; absent when off") {
  SpecLimits i2v;
  i2v.image = InputUse::required;
  const auto s = parse_job_spec(json::parse(R"({"prompt":"p","extend":true,"video":"/up/a.mp4","video_sha256":")" + kHash + R"("})"),
                                JobSpec{}, i2v);
  CHECK(s.extend);
  CHECK(has_first_frame(s));
  const auto fields = to_json(s);
  CHECK(fields.at("extend").as_bool());
  CHECK_FALSE(fields.contains("strength"));
  const auto back = parse_job_spec(json::value(fields), JobSpec{}, i2v);
  CHECK(back.extend);
  CHECK(job_content_key("m", back) == job_content_key("m", s));
  auto other = s;  // another clip to extend: another result
  other.video_sha256 = std::string(64, 'c');
  CHECK(job_content_key("m", other) != job_content_key("m", s));
  SpecLimits v2v = i2v;  // the same video as a video-to-video input is another job
  v2v.video = InputUse::optional;
  auto restyle = parse_job_spec(json::parse(R"({"prompt":"p","image":"/a.png","video":"/up/a.mp4","video_sha256":")" + kHash + R"("})"),
                                JobSpec{}, v2v);
  CHECK(job_content_key("m", restyle) != job_content_key("m", s));
  JobSpec plain;
  plain.prompt = "p";
  CHECK_FALSE(to_json(plain).contains("extend"));
  CHECK_FALSE(has_first_frame(plain));
}

// Review finding 5: an extend job with its video's kept latents renders slightly other bytes than
// the same spec without them; the result cache took them for one.
TEST_CASE("extend by latents: the kept latents' hash is in the content key; absent, the key is as before") {
  SpecLimits df;
  df.extend_overlap = 5;
  df.frames_step = 4;
  const std::string spec = R"({"prompt":"p","extend":true,"frames":9,"video":"/up/a.mp4","video_sha256":")" + kHash + R"(")";
  const auto without = parse_job_spec(json::parse(spec + "}"), JobSpec{}, df);
  const auto with = parse_job_spec(json::parse(spec + R"(,"video_latents_sha256":")" + std::string(64, 'e') + R"("})"), JobSpec{}, df);
  CHECK(with.video_latents_sha256 == std::string(64, 'e'));
  CHECK(job_content_key("m", with) != job_content_key("m", without));
  CHECK_FALSE(to_json(without).contains("video_latents_sha256"));
  const auto back = parse_job_spec(json::value(to_json(with)), JobSpec{}, df);
  CHECK(job_content_key("m", back) == job_content_key("m", with));
  auto other = with;  // other latents of the same video (rendered again): another result
  other.video_latents_sha256 = std::string(64, 'f');
  CHECK(job_content_key("m", other) != job_content_key("m", with));
  // Only for an extend job of a package that extends by latents, and a real hash.
  SpecLimits i2v;
  i2v.image = InputUse::required;
  const std::string latents = R"(,"video_latents_sha256":")" + std::string(64, 'e') + R"("})";
  CHECK(image_error_of(spec + latents, i2v).starts_with("video_latents_sha256: only for an extend job"));
  CHECK(image_error_of(R"({"prompt":"p","image":"/a.png")" + latents, i2v).starts_with("video_latents_sha256: only for an extend job"));
  CHECK(image_error_of(spec + R"(,"video_latents_sha256":"abc"})", df).starts_with("video_latents_sha256: must be 64 lowercase hex"));
}

// Wan VACE (issue 34 item 3): the mask video, reference images and conditioning scale.
TEST_CASE("VACE fields: taken only where the package says, each refusal naming its field") {
  SpecLimits t2v;
  t2v.model_name = "wan-t2v";
  SpecLimits vace = t2v;
  vace.model_name = "wan-vace";
  vace.video = vace.mask_video = vace.reference_images = InputUse::optional;
  CHECK(image_error_of(R"({"prompt":"p","video":"/c.mp4","mask_video":"/m.mp4"})", t2v).starts_with("video:"));
  CHECK(image_error_of(R"({"prompt":"p","reference_images":["/r.png"]})", t2v) ==
        "reference_images: model 'wan-t2v' does not take reference images");
  CHECK(image_error_of(R"({"prompt":"p","conditioning_scale":0.5})", t2v).starts_with("conditioning_scale: model 'wan-t2v' takes no control input"));
  CHECK(image_error_of(R"({"prompt":"p","video":"/c.mp4","mask_video":"/m.mp4","reference_images":["/r.png","/s.png"],"conditioning_scale":0.5})",
                       vace).empty());
  CHECK(image_error_of(R"({"prompt":"p","mask_video":"/m.mp4"})", vace).starts_with("mask_video: needs video"));
  CHECK(image_error_of(R"({"prompt":"p","video":"/c.mp4","mask_video":"m.mp4"})", vace).starts_with("mask_video: must be an absolute path"));
  CHECK(image_error_of(R"({"prompt":"p","reference_images":"/r.png"})", vace).starts_with("reference_images: must be an array"));
  CHECK(image_error_of(R"({"prompt":"p","reference_images":["/r.png","r.png"]})", vace).starts_with("reference_images[1]: must be an absolute path"));
  CHECK(image_error_of(R"({"prompt":"p","reference_images":["/a","/b","/c","/d","/e"]})", vace).starts_with("reference_images: at most 4"));
  CHECK(image_error_of(R"({"prompt":"p","conditioning_scale":-1})", vace).starts_with("conditioning_scale: must be between 0 and 10"));
  CHECK(image_error_of(R"({"prompt":"p","conditioning_scale":"x"})", vace).starts_with("conditioning_scale:"));
  CHECK(image_error_of(R"({"prompt":"p","mask_video_sha256":")" + kHash + R"("})", vace).starts_with("mask_video_sha256: given without mask_video"));
}

TEST_CASE("VACE content key: the mask's and references' bytes and the scale, not their paths; absent without them") {
  SpecLimits vace;
  vace.video = vace.mask_video = vace.reference_images = InputUse::optional;
  const auto s = parse_job_spec(json::parse(R"({"prompt":"p","video":"/c.mp4","video_sha256":")" + kHash +
                                            R"(","mask_video":"/m.mp4","mask_video_sha256":")" + kHash +
                                            R"(","reference_images":["/r.png"],"reference_images_sha256":[")" + kHash +
                                            R"("],"conditioning_scale":0.5})"),
                                JobSpec{}, vace);
  const auto back = parse_job_spec(json::value(to_json(s)), JobSpec{}, vace);
  CHECK(back.mask_video == "/m.mp4");
  CHECK(back.reference_images == std::vector<std::string>{"/r.png"});
  CHECK(back.reference_images_sha256 == std::vector<std::string>{kHash});
  CHECK(back.conditioning_scale == 0.5);
  auto moved = s;
  moved.mask_video = "/elsewhere/m.mp4";
  moved.reference_images = {"/elsewhere/r.png"};
  CHECK(job_content_key("m", moved) == job_content_key("m", s));
  auto other_mask = s;
  other_mask.mask_video_sha256 = std::string(64, 'c');
  CHECK(job_content_key("m", other_mask) != job_content_key("m", s));
  auto other_ref = s;
  other_ref.reference_images_sha256 = {std::string(64, 'c')};
  CHECK(job_content_key("m", other_ref) != job_content_key("m", s));
  auto no_ref = s;
  no_ref.reference_images.clear();
  no_ref.reference_images_sha256.clear();
  CHECK(job_content_key("m", no_ref) != job_content_key("m", s));
  auto full_scale = s;
  full_scale.conditioning_scale = 1.0;
  CHECK(job_content_key("m", full_scale) != job_content_key("m", s));
  JobSpec t2v;  // a job without them keeps the key it had
  t2v.prompt = "p";
  CHECK_FALSE(to_json(t2v).contains("mask_video"));
  CHECK_FALSE(to_json(t2v).contains("reference_images"));
  CHECK_FALSE(to_json(t2v).contains("conditioning_scale"));
}
