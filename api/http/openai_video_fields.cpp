#include "api/http/openai_video_fields.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace vgen {

namespace json = boost::json;
namespace bhttp = boost::beast::http;

namespace openai {

namespace {

// The request field a vgen field error is about: vgen names its own field ("width: must be a
// multiple of 16"); the client sent "size" or "seconds".
std::string param_of(std::string_view message) {
  const auto colon = message.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > 40) return {};
  const auto field = message.substr(0, colon);
  if (!std::all_of(field.begin(), field.end(), [](char c) { return std::islower(static_cast<unsigned char>(c)) || c == '_'; }))
    return {};
  if (field == "width" || field == "height") return "size";
  if (field == "frames") return "seconds";
  if (field == "image" || field == "last_image") return "input_reference";
  return std::string(field);
}

std::string type_for(unsigned status) {
  if (status == 401) return "authentication_error";
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

double number_of(std::string_view text, std::string_view field) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
    throw_error(ErrorKind::invalid_argument, std::string(field) + ": must be a number (got '" + truncate_utf8(std::string(text), 40) + "')");
  return v;
}

std::int64_t integer_of(std::string_view text, std::string_view field) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw_error(ErrorKind::invalid_argument, std::string(field) + ": must be an integer (got '" + truncate_utf8(std::string(text), 40) + "')");
  return v;
}

std::string text_of(const json::value& v, std::string_view field) {
  if (v.is_string()) return std::string(v.get_string());
  if (v.is_int64() || v.is_uint64() || v.is_double()) return json::serialize(v);
  throw_error(ErrorKind::invalid_argument, std::string(field) + ": must be a string");
}

enum class Kind { integer, unsigned_integer, number, text, json_text };
struct PassThrough {
  std::string_view name;
  Kind kind;
};
// vgen's own fields a create request may carry (the SDK's extra_body), and their types when
// they come as multipart text.
constexpr PassThrough kPassThrough[] = {
    {"steps", Kind::integer},         {"guidance", Kind::number}, {"seed", Kind::unsigned_integer},
    {"negative_prompt", Kind::text},  {"loras", Kind::json_text}, {"priority", Kind::integer},
    {"step_cache", Kind::number},     {"precision", Kind::text},  {"scheduler", Kind::text},
    {"shift", Kind::number},          {"fps", Kind::number},      {"format", Kind::text},
};

json::value pass_through(const PassThrough& field, const json::value& v, bool text_fields) {
  if (!text_fields || !v.is_string()) return v;  // JSON keeps its types: validation names a wrong one
  const std::string_view text = v.get_string();
  switch (field.kind) {
    case Kind::integer: return integer_of(text, field.name);
    case Kind::unsigned_integer: {
      if (!text.empty() && text.front() == '-') return integer_of(text, field.name);  // refused by validation, by name
      std::uint64_t n = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (text.empty() || ec != std::errc() || end != text.data() + text.size())
        throw_error(ErrorKind::invalid_argument, std::string(field.name) + ": must be an integer (got '" + truncate_utf8(std::string(text), 40) + "')");
      return n;
    }
    case Kind::number: return number_of(text, field.name);
    case Kind::text: return v;
    case Kind::json_text: {
      boost::system::error_code ec;
      auto parsed = json::parse(text, ec);
      if (ec) throw_error(ErrorKind::invalid_argument, std::string(field.name) + ": must be JSON text in a form field (" + ec.message() + ")");
      return parsed;
    }
  }
  return v;
}

}  // namespace

ApiError api_error(const std::exception_ptr& error) {
  const auto kind = classify(error);
  ApiError e;
  e.status = static_cast<unsigned>(http_status_for(kind));
  e.type = type_for(e.status);
  e.code = std::string(to_string(kind));
  e.message = describe(error);
  if (kind == ErrorKind::invalid_argument) e.param = param_of(e.message);
  return e;
}

http::StringResponse error_response(const ApiError& e) {
  json::object error{{"message", e.message}, {"type", e.type}, {"code", e.code}};
  error["param"] = e.param.empty() ? json::value(nullptr) : json::value(e.param);
  auto res = http::json_response(e.status, json::serialize(json::object{{"error", std::move(error)}}));
  if (e.status == 429 || e.status == 503) res.set(bhttp::field::retry_after, "1");
  if (e.status == 401) res.set(bhttp::field::www_authenticate, "Bearer");
  return res;
}

std::string seconds_text(int frames, double fps) {
  const double s = fps > 0 ? std::max(frames - 1, 0) / fps : 0.0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  std::string t = buf;
  while (t.back() == '0') t.pop_back();
  if (t.back() == '.') t.pop_back();
  return t;
}

int frames_for(std::string_view seconds, double fps, const SpecLimits& limits) {
  const double s = number_of(seconds, "seconds");
  if (s < 0 || s > 3600) throw_error(ErrorKind::invalid_argument, "seconds: must be in [0, 3600] (got " + std::string(seconds) + ")");
  const int step = std::max(limits.frames_step, 1);
  const double k = std::round(s * fps / step);
  const double frames = step * k + 1;
  if (frames < limits.min_frames || frames > limits.max_frames)
    throw_error(ErrorKind::invalid_argument,
                "seconds: " + std::string(seconds) + " is " + std::to_string(static_cast<long long>(frames)) + " frames at " +
                    seconds_text(2, 1.0 / fps) + " fps; this model makes " + seconds_text(limits.min_frames, fps) + " to " +
                    seconds_text(limits.max_frames, fps) + " seconds (" + std::to_string(limits.min_frames) + " to " +
                    std::to_string(limits.max_frames) + " frames)");
  return static_cast<int>(frames);
}

json::object job_spec_from(const json::object& request, const ServedModel& model, bool text_fields) {
  json::object spec;
  double fps = model.defaults.fps;
  for (const auto& kv : request) {
    const std::string_view key = kv.key();
    if (key == "prompt") spec["prompt"] = text_of(kv.value(), key);
    else if (key == "model") spec["model"] = model.name;
    else if (key == "size" || key == "seconds" || key == "input_reference") continue;  // below; the image by the caller
    else if (const auto* p = std::find_if(std::begin(kPassThrough), std::end(kPassThrough), [&](const auto& f) { return f.name == key; });
             p != std::end(kPassThrough)) {
      spec[key] = pass_through(*p, kv.value(), text_fields);
      if (key == "fps" && spec[key].is_number()) fps = spec[key].to_number<double>();
    } else {
      throw_error(ErrorKind::invalid_argument, std::string(key) + ": unknown parameter (known: prompt, model, size, seconds, "
                                               "input_reference, and vgen's steps, guidance, seed, negative_prompt, loras, "
                                               "priority, step_cache, precision, scheduler, shift, fps, format)");
    }
  }
  if (!spec.contains("prompt")) throw_error(ErrorKind::invalid_argument, "prompt: required");
  if (const auto* size = request.if_contains("size")) {
    const auto text = text_of(*size, "size");
    const auto x = text.find('x');
    if (x == std::string::npos || x == 0 || x + 1 == text.size())
      throw_error(ErrorKind::invalid_argument, "size: must be WIDTHxHEIGHT, e.g. 832x480 (got '" + truncate_utf8(text, 40) + "')");
    spec["width"] = integer_of(std::string_view(text).substr(0, x), "size");
    spec["height"] = integer_of(std::string_view(text).substr(x + 1), "size");
  }
  if (const auto* seconds = request.if_contains("seconds")) {
    if (!(fps > 0)) throw_error(ErrorKind::invalid_argument, "fps: must be positive");
    spec["frames"] = frames_for(text_of(*seconds, "seconds"), fps, model.limits);
  }
  return spec;
}

std::string_view status_of(std::string_view s) {
  if (s == "queued" || s == "interrupted") return "queued";  // an interrupted job resumes
  if (s == "done") return "completed";
  if (s == "failed" || s == "cancelled") return "failed";
  return "in_progress";  // running, or the stage it runs
}

json::object video_json(const VideoFacts& v) {
  json::object o{{"id", v.id},
                 {"object", "video"},
                 {"model", v.model},
                 {"status", v.status},
                 {"progress", v.progress},
                 {"created_at", v.created_at},
                 {"size", std::to_string(v.width) + "x" + std::to_string(v.height)},
                 {"seconds", seconds_text(v.frames, v.fps)},
                 {"prompt", v.prompt},
                 {"remixed_from_video_id", v.remixed_from.empty() ? json::value(nullptr) : json::value(v.remixed_from)}};
  o["completed_at"] = v.completed_at ? json::value(*v.completed_at) : json::value(nullptr);
  o["expires_at"] = v.expires_at ? json::value(*v.expires_at) : json::value(nullptr);
  o["error"] = v.status == "failed" ? json::value(json::object{{"code", v.error_code}, {"message", v.error_message}})
                                    : json::value(nullptr);
  return o;
}

}  // namespace openai

}  // namespace vgen
