#include "api/http/openai_video_edits.hpp"

#include "api/http/multipart.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>

namespace vgen {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
namespace fs = std::filesystem;

namespace {

// The upload as submit's parts, moved (an initializer list would copy up to videos.max_bytes).
std::vector<std::pair<std::string, std::string>> video_part(std::string bytes) {
  std::vector<std::pair<std::string, std::string>> parts;
  parts.emplace_back("video", std::move(bytes));
  return parts;
}

// A refusal that is not a vgen error kind's status (409 with its own code, 404 naming a field):
// answered as it is.
struct Refusal {
  openai::ApiError error;
};

constexpr std::string_view kVgenFields[] = {"steps", "guidance", "seed", "negative_prompt", "loras", "priority",
                                            "step_cache", "precision", "scheduler", "shift", "fps", "format"};

bool is_vgen_field(std::string_view key) {
  return std::find(std::begin(kVgenFields), std::end(kVgenFields), key) != std::end(kVgenFields);
}

using http::json_body;

void require_video_media(const http::Request& request) {
  if (http::has_content_type(request, "multipart/form-data") || http::has_content_type(request, "application/json")) return;
  throw Refusal{{415, "invalid_request_error", "unsupported_media_type",
                 "Content-Type must be application/json or multipart/form-data", ""}};
}

// Runs a route, answering errors in OpenAI's envelope. `renames` maps a vgen field an error
// names onto the request field the client sent ("extend" is what the client chose by the route).
template <class F>
http::Response answered(F&& route, std::initializer_list<std::pair<std::string_view, std::string_view>> renames = {}) {
  try {
    return route();
  } catch (const Refusal& r) {
    return openai::error_response(r.error);
  } catch (...) {
    auto e = openai::api_error(std::current_exception());
    for (const auto& [from, to] : renames)
      if (e.param == from) e.param = std::string(to);
    return openai::error_response(e);
  }
}

// Takes a field out of the request (nullopt when absent).
std::optional<json::value> take(json::object& fields, std::string_view key) {
  const auto it = fields.find(key);
  if (it == fields.end()) return std::nullopt;
  auto v = it->value();
  fields.erase(it);
  return v;
}

std::string text_of(const json::value& v, std::string_view field) {
  if (v.is_string()) return std::string(v.get_string());
  if (v.is_number()) return json::serialize(v);
  throw_error(ErrorKind::invalid_argument, std::string(field) + ": must be a string");
}

// strength as a number (multipart sends text); its range is the job spec's to check.
json::value number_field(const json::value& v, std::string_view field) {
  if (!v.is_string()) return v;  // JSON keeps its type: validation names a wrong one
  const auto text = std::string_view(v.get_string());
  double d = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(d))
    throw_error(ErrorKind::invalid_argument, std::string(field) + ": must be a number (got '" + truncate_utf8(text, 40) + "')");
  return d;
}

const ServedModel* named(const std::vector<ServedModel>& served, std::string_view name) {
  for (const auto& m : served)
    if (m.name == name) return &m;
  return nullptr;
}

// Whether a model's video is where denoising starts (video-to-video: strength). Not a model whose
// video is a control input (it takes a mask or reference images too) nor one that
// extends a video by its latents (diffusion forcing): for those an edit or remix is another job.
bool restyles_video(const ServedModel& m) {
  return m.limits.video != InputUse::none && m.limits.mask_video == InputUse::none &&
         m.limits.reference_images == InputUse::none && m.limits.extend_overlap == 0;
}

// The model a request names; else the source's when `fits` it; else the first served that fits;
// else the default (whose validation then names what it lacks).
template <class Fits>
const ServedModel& pick_model(const std::vector<ServedModel>& served, const json::object& fields, const JobSpec* source, Fits fits) {
  if (const auto* m = fields.if_contains("model")) {
    const auto name = text_of(*m, "model");
    if (const auto* found = named(served, name)) return *found;
    std::string known;
    for (const auto& s : served) known += (known.empty() ? "" : ", ") + s.name;
    throw_error(ErrorKind::invalid_argument, "model: '" + truncate_utf8(name, 60) + "' is not served here (GET /v1/models: " + known + ")");
  }
  if (source) {
    const auto* own = source->model.empty() ? &served.front() : named(served, source->model);
    if (own && fits(*own)) return *own;
  }
  for (const auto& m : served)
    if (fits(m)) return m;
  return served.front();
}

std::string file_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in && !in.eof()) throw_error(ErrorKind::transient, "cannot read " + file.filename().string());
  return std::move(out).str();
}

}  // namespace

namespace openai {

VideoRequest read_video_request(const http::Request& request, std::uint64_t max_video_bytes) {
  VideoRequest r;
  bool has_file = false;
  const auto check_size = [&](std::size_t n) {
    if (n > max_video_bytes)
      throw_error(ErrorKind::invalid_argument, "video: larger than " + std::to_string(max_video_bytes) + " bytes (got " + std::to_string(n) + ")");
  };
  if (http::has_content_type(request, "multipart/form-data")) {
    r.text_fields = true;
    const auto it = request.find(bhttp::field::content_type);
    const auto parts = parse_multipart(request.body(), multipart_boundary(std::string_view(it->value().data(), it->value().size())),
                                       MultipartLimits{.max_parts = 32});
    for (const auto& part : parts) {
      if (part.name == "video") {
        check_size(part.body.size());
        r.video_bytes = std::string(part.body);
        has_file = true;
      } else if (part.name == "video[id]") {
        r.video_id = std::string(part.body);
      } else if (part.name.rfind("video[", 0) == 0) {
        throw_error(ErrorKind::invalid_argument, "video: a file part or video[id] (a completed video's id)");
      } else {
        r.fields[part.name] = std::string(part.body);
      }
    }
  } else {
    boost::system::error_code ec;
    auto body = json::parse(request.body(), ec);
    if (ec || !body.is_object())
      throw_error(ErrorKind::invalid_argument, "request body: must be a JSON object (" + (ec ? ec.message() : "got another type") + ")");
    r.fields = std::move(body.as_object());
    if (auto v = take(r.fields, "video")) {
      const auto* id = v->is_object() ? v->as_object().if_contains("id") : nullptr;
      if (!id || !id->is_string() || v->as_object().size() != 1)
        throw_error(ErrorKind::invalid_argument, "video: in a JSON body must be {\"id\": <a completed video's id>}; "
                                                 "send a file as multipart/form-data");
      r.video_id = std::string(id->get_string());
    }
  }
  if (has_file && !r.video_id.empty()) throw_error(ErrorKind::invalid_argument, "video: given twice (a file and an id)");
  if (!has_file && r.video_id.empty())
    throw_error(ErrorKind::invalid_argument, "video: required (a file part, or {\"id\": <a completed video's id>})");
  if (!has_file && r.video_id.size() > 200) throw_error(ErrorKind::invalid_argument, "video: id longer than 200 bytes");
  return r;
}

json::object remix_spec(const JobSpec& source, std::string_view prompt, const json::object& overrides) {
  auto spec = to_json(source);
  for (const char* input : {"name", "image", "image_sha256", "last_image", "last_image_sha256", "video", "video_sha256",
                            "mask_video", "mask_video_sha256", "reference_images", "reference_images_sha256", "strength",
                            "extend"})
    spec.erase(input);
  spec["prompt"] = prompt;
  for (const auto& kv : overrides) {
    const std::string_view key = kv.key();
    if (key == "model" || key == "size" || key == "seconds")
      throw_error(ErrorKind::invalid_argument, std::string(key) + ": a remix keeps the original's model, size and seconds "
                                                                  "(use videos.edit for another)");
    if (!is_vgen_field(key))
      throw_error(ErrorKind::invalid_argument, std::string(key) + ": unknown parameter (known: prompt, strength, and vgen's "
                                                                  "steps, guidance, seed, negative_prompt, loras, priority, "
                                                                  "step_cache, precision, scheduler, shift, fps, format)");
    spec[key] = kv.value();
  }
  return spec;
}

}  // namespace openai

OpenAiVideoEdits::OpenAiVideoEdits(const fs::path& output_dir, std::uint64_t max_video_bytes, Context context)
    : max_video_bytes_(max_video_bytes), context_(std::move(context)), remixes_(output_dir / ".vgen-videos-remixed", context_.exists) {}

std::vector<std::pair<std::string, std::string>> OpenAiVideoEdits::routes() {
  return {{"POST", "/v1/videos/edits"}, {"POST", "/v1/videos/{id}/remix"}, {"POST", "/v1/videos/extensions"}};
}

std::string OpenAiVideoEdits::remixed_from(std::string_view id) const { return remixes_.source_of(id); }

void OpenAiVideoEdits::forget(std::string_view id) { remixes_.forget(id); }

OpenAiVideoEdits::Finished OpenAiVideoEdits::completed(const std::string& id, std::string_view param) const {
  const auto facts = context_.facts(id);
  if (!facts) throw Refusal{{404, "invalid_request_error", "not_found", "video '" + truncate_utf8(id, 60) + "' not found", std::string(param)}};
  if (facts->status != "completed")
    throw Refusal{{409, "invalid_request_error", "video_not_ready",
                   "video '" + id + "' is " + facts->status + "; only a completed video can be used", std::string(param)}};
  auto finished = context_.finished(id);
  std::error_code ec;
  if (!finished || finished->output.empty() || fs::is_directory(finished->output, ec))
    throw Refusal{{409, "invalid_request_error", "no_video_file",
                   "video '" + id + "' was written as a frame directory (format png), not a video file", std::string(param)}};
  return std::move(*finished);
}

std::string OpenAiVideoEdits::read_output(const Finished& source) const {
  std::error_code ec;
  const auto size = fs::file_size(source.output, ec);
  if (ec) throw Refusal{{409, "invalid_request_error", "no_video_file", "the video's file is gone", "video"}};
  if (size > max_video_bytes_)
    throw_error(ErrorKind::invalid_argument, "video: its file is larger than videos.max_bytes (" + std::to_string(max_video_bytes_) + " bytes)");
  return file_bytes(source.output);
}

OpenAiVideoEdits::VideoIn OpenAiVideoEdits::video_in(const http::Request& request, bool (*fits)(const ServedModel&)) const {
  require_video_media(request);
  VideoIn in;
  in.request = openai::read_video_request(request, max_video_bytes_);
  if (!in.request.video_id.empty()) in.source = completed(in.request.video_id, "video");
  in.served = context_.served();
  in.model = &pick_model(in.served, in.request.fields, in.source ? &in.source->spec : nullptr, fits);
  return in;
}

http::Response OpenAiVideoEdits::answer(const JobHandle& job) const {
  return json_body(200, openai::video_json(context_.describe(job)));
}

http::Response OpenAiVideoEdits::edit(const http::Request& request) {
  return answered([&]() -> http::Response {
    auto in = video_in(request, restyles_video);
    auto& req = in.request;
    const auto& source = in.source;
    const auto& model = *in.model;
    const auto strength = take(req.fields, "strength");
    auto spec = openai::job_spec_from(req.fields, model, req.text_fields);
    spec["model"] = model.name;
    if (source && !spec.contains("width")) {  // the source's size and length unless asked otherwise
      spec["width"] = source->spec.width;
      spec["height"] = source->spec.height;
    }
    if (source && !spec.contains("frames")) spec["frames"] = source->spec.frames;
    if (strength) spec["strength"] = number_field(*strength, "strength");
    auto bytes = source ? read_output(*source) : std::move(req.video_bytes);
    return answer(context_.submit(json::value(std::move(spec)), video_part(std::move(bytes))));
  });
}

http::Response OpenAiVideoEdits::extend(const http::Request& request) {
  return answered([&]() -> http::Response {
    auto in = video_in(request, [](const ServedModel& m) { return m.limits.image != InputUse::none || m.limits.extend_overlap > 0; });
    auto& req = in.request;
    const auto& source = in.source;
    const auto& model = *in.model;
    const auto seconds = take(req.fields, "seconds");
    if (!seconds) throw_error(ErrorKind::invalid_argument, "seconds: required (the new segment's length)");
    const auto strength = take(req.fields, "strength");
    auto spec = openai::job_spec_from(req.fields, model, req.text_fields);
    spec["model"] = model.name;
    spec["extend"] = true;
    // The segment's frames at the rate the joined clip keeps: the request's, else the source's.
    double fps = source ? source->spec.fps : model.defaults.fps;
    if (const auto* f = spec.if_contains("fps"); f && f->is_number()) fps = f->to_number<double>();
    if (!(fps > 0)) throw_error(ErrorKind::invalid_argument, "fps: must be positive");
    // Both paths add frames - 1 new frames after the clip: the image-to-video segment starts with
    // the clip's last frame, a by-latents one with its last extend_overlap frames.
    spec["frames"] = openai::frames_for(text_of(*seconds, "seconds"), fps, model.limits) + std::max(model.limits.extend_overlap - 1, 0);
    if (source && !spec.contains("width")) {
      spec["width"] = source->spec.width;
      spec["height"] = source->spec.height;
    }
    if (strength) spec["strength"] = number_field(*strength, "strength");  // refused by the job spec, by name
    auto bytes = source ? read_output(*source) : std::move(req.video_bytes);
    return answer(context_.submit(json::value(std::move(spec)), video_part(std::move(bytes))));
  }, {{"extend", "model"}});
}

http::Response OpenAiVideoEdits::remix(const http::Request& request, const std::string& id) {
  return answered([&]() -> http::Response {
    if (!http::has_content_type(request, "application/json"))
      return openai::error_response({415, "invalid_request_error", "unsupported_media_type", "Content-Type must be application/json", ""});
    boost::system::error_code ec;
    auto body = json::parse(request.body(), ec);
    if (ec || !body.is_object())
      throw_error(ErrorKind::invalid_argument, "request body: must be a JSON object (" + (ec ? ec.message() : "got another type") + ")");
    auto fields = std::move(body.as_object());
    const auto prompt = take(fields, "prompt");
    if (!prompt || !prompt->is_string()) throw_error(ErrorKind::invalid_argument, "prompt: required (a string)");
    const auto strength = take(fields, "strength");
    auto source = completed(id, "");
    const auto served = context_.served();
    const auto* model = source.spec.model.empty() ? &served.front() : named(served, source.spec.model);
    if (!model)
      throw Refusal{{409, "invalid_request_error", "model_gone", "video '" + id + "' was made by model '" + source.spec.model +
                                                                    "', which is no longer served", "model"}};
    auto spec = openai::remix_spec(source.spec, prompt->get_string(), fields);
    std::vector<std::pair<std::string, std::string>> files;
    // A model whose video is a control input or that extends videos by their latents re-renders
    // with the original's inputs: video-to-video's strength is not its to take.
    const bool controlled = model->limits.video != InputUse::none && !restyles_video(*model);
    if (restyles_video(*model) && !source.spec.extend) {
      // Video-to-video on what the original made: the new prompt restyles it.
      spec["strength"] = strength ? *strength : json::value(kRemixStrength);
      files.emplace_back("video", read_output(source));
    } else {
      if (strength)
        throw_error(ErrorKind::invalid_argument, "strength: model '" + model->name + "' takes " +
                                                     (controlled ? "its video as a control input or extends it" : "no video") + "; its remix re-renders");
      // The same job with a new prompt: its uploaded inputs again, if the uploads folder still
      // holds them (an upload goes when its last job ends).
      std::vector<std::pair<const std::string*, const char*>> inputs{{&source.spec.image, "image"},
                                                                     {&source.spec.last_image, "last_image"},
                                                                     {&source.spec.video, "video"},
                                                                     {&source.spec.mask_video, "mask_video"}};
      for (const auto& reference : source.spec.reference_images) inputs.emplace_back(&reference, "reference_images");
      for (const auto& [path, field] : inputs) {
        if (path->empty()) continue;
        std::error_code exists;
        if (!fs::is_regular_file(*path, exists))
          throw Refusal{{409, "invalid_request_error", "input_gone",
                         "video '" + id + "' was made from an uploaded " + field + " that is no longer kept; send it again "
                         "with videos.create (input_reference) or videos.extend", ""}};
        files.emplace_back(field, file_bytes(*path));
      }
      if (source.spec.extend) spec["extend"] = true;
    }
    const auto job = context_.submit(json::value(std::move(spec)), std::move(files));
    remixes_.add(job.id(), id);
    return answer(job);
  });
}

}  // namespace vgen
