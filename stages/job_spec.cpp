#include "stages/job_spec.hpp"

#include "runtime/errors.hpp"
#include "runtime/job.hpp"  // Job::kMaxPriority
#include "stages/text/tokenizer.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

namespace vgen {

namespace json = boost::json;

namespace {

[[noreturn]] void bad(std::string_view field, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, std::string(field) + ": " + what);
}

std::string shown(const json::value& v) {
  auto s = json::serialize(v);
  return s.size() > 40 ? truncate_utf8(s, 40) + "..." : s;
}

// A number as a person writes it: 16, 23.976, 1e-09 (not Boost.JSON's 1.6E1).
std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::int64_t as_integer(const json::value& v, std::string_view field) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64()) {
    if (v.get_uint64() > static_cast<std::uint64_t>(INT64_MAX)) bad(field, "out of range (got " + shown(v) + ")");
    return static_cast<std::int64_t>(v.get_uint64());
  }
  if (v.is_double() && std::isfinite(v.get_double()) && std::floor(v.get_double()) == v.get_double() &&
      std::abs(v.get_double()) < 9.0e15)
    return static_cast<std::int64_t>(v.get_double());
  bad(field, "must be an integer (got " + shown(v) + ")");
}

double as_number(const json::value& v, std::string_view field) {
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  if (v.is_double() && std::isfinite(v.get_double())) return v.get_double();
  bad(field, "must be a number (got " + shown(v) + ")");
}

std::string as_text(const json::value& v, std::string_view field) {
  if (!v.is_string()) bad(field, "must be a string (got " + shown(v) + ")");
  std::string s(v.get_string());
  if (!is_valid_utf8(s)) bad(field, "not valid UTF-8");
  return s;
}

int as_int(const json::value& v, std::string_view field) {
  const auto i = as_integer(v, field);
  if (i < INT32_MIN || i > INT32_MAX) bad(field, "out of range (got " + shown(v) + ")");
  return static_cast<int>(i);
}

// An image path as the spec carries it: absolute (the front ends resolve relative ones, so a
// journal replayed from another working directory finds the same file), UTF-8, no NUL.
void check_image_path(const std::string& path, std::string_view field) {
  if (path.empty()) return;
  if (path.size() > 4096) bad(field, "path longer than 4096 bytes");
  if (path.find('\0') != std::string::npos) bad(field, "path contains a NUL byte");
  if (path.front() != '/') bad(field, "must be an absolute path (got '" + truncate_utf8(path, 80) + "')");
}

void check_sha256(const std::string& hex, std::string_view field) {
  if (hex.empty()) return;
  const bool ok = hex.size() == 64 && std::all_of(hex.begin(), hex.end(), [](char c) {
                    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                  });
  if (!ok) bad(field, "must be 64 lowercase hex digits");
}

std::string model_named(const SpecLimits& l) { return l.model_name.empty() ? "this model" : "model '" + l.model_name + "'"; }

// "extend": the clip in `video` goes on from its last frame through an image-to-video package.
void check_extend(const JobSpec& s, const SpecLimits& l) {
  check_sha256(s.video_latents_sha256, "video_latents_sha256");
  if (!s.video_latents_sha256.empty() && (!s.extend || l.extend_overlap <= 0))
    bad("video_latents_sha256", "only for an extend job of a model that extends by latents");
  if (!s.extend) return;
  if (s.video.empty()) bad("extend", "needs video (the clip to extend)");
  if (l.image == InputUse::none && l.extend_overlap == 0)
    bad("extend", model_named(l) + " takes no image; extending conditions an image-to-video model on the clip's last frame");
  // By latents: the segment starts with the clip's last extend_overlap frames; at least one more
  // latent frame is new.
  if (l.extend_overlap > 0 && s.frames < l.extend_overlap + l.frames_step)
    bad("frames", "an extend job's segment starts with the clip's last " + std::to_string(l.extend_overlap) +
                      " frames; needs at least " + std::to_string(l.extend_overlap + l.frames_step) + " (got " +
                      std::to_string(s.frames) + ")");
  if (!s.image.empty()) bad("image", "an extend job's first frame is its video's last frame; give no image");
  if (s.frames < 2) bad("frames", "an extend job adds frames - 1 frames to its video; needs at least 2 (got " + std::to_string(s.frames) + ")");
}

void check_images(const JobSpec& s, const SpecLimits& l) {
  check_image_path(s.image, "image");
  check_image_path(s.last_image, "last_image");
  check_sha256(s.image_sha256, "image_sha256");
  check_sha256(s.last_image_sha256, "last_image_sha256");
  if (s.image.empty() && !s.image_sha256.empty()) bad("image_sha256", "given without image");
  if (s.last_image.empty() && !s.last_image_sha256.empty()) bad("last_image_sha256", "given without last_image");
  check_extend(s, l);
  if (!s.image.empty() && l.image == InputUse::none) bad("image", model_named(l) + " does not take an image");
  if (!has_first_frame(s) && l.image == InputUse::required) bad("image", "required by " + model_named(l));
  if (!s.last_image.empty() && l.last_image == InputUse::none) bad("last_image", model_named(l) + " does not take a last image");
  if (!s.last_image.empty() && !has_first_frame(s)) bad("last_image", "needs image (the first frame) as well");
  check_image_path(s.video, "video");
  check_sha256(s.video_sha256, "video_sha256");
  if (s.video.empty() && !s.video_sha256.empty()) bad("video_sha256", "given without video");
  // An extend job's video is not the model's input (its last frame is the image): the package
  // needs to take an image, which check_extend asked.
  if (!s.video.empty() && !s.extend && l.video == InputUse::none) bad("video", model_named(l) + " does not take a video");
  if (s.video.empty() && l.video == InputUse::required) bad("video", "required by " + model_named(l));
  if (!(s.strength > 0.0 && s.strength <= 1.0))
    bad("strength", "must be above 0 and at most 1 (got " + number_text(s.strength) + ")");
}

// The Wan VACE fields (JobSpec's block): each refused by name for a package that does not take it.
void check_vace(const JobSpec& s, const SpecLimits& l) {
  check_image_path(s.mask_video, "mask_video");
  check_sha256(s.mask_video_sha256, "mask_video_sha256");
  if (s.mask_video.empty() && !s.mask_video_sha256.empty()) bad("mask_video_sha256", "given without mask_video");
  if (!s.mask_video.empty() && l.mask_video == InputUse::none) bad("mask_video", model_named(l) + " does not take a mask video");
  if (!s.mask_video.empty() && (s.video.empty() || s.extend)) bad("mask_video", "needs video (the control video it masks)");
  if (s.mask_video.empty() && l.mask_video == InputUse::required) bad("mask_video", "required by " + model_named(l));
  if (s.reference_images.size() > 4) bad("reference_images", "at most 4 (got " + std::to_string(s.reference_images.size()) + ")");
  for (std::size_t i = 0; i < s.reference_images.size(); ++i) {
    const auto field = "reference_images[" + std::to_string(i) + "]";
    if (s.reference_images[i].empty()) bad(field, "must be a path");
    check_image_path(s.reference_images[i], field);
  }
  if (!s.reference_images_sha256.empty() && s.reference_images_sha256.size() != s.reference_images.size())
    bad("reference_images_sha256", "must have one hash per reference image");
  for (const auto& h : s.reference_images_sha256) check_sha256(h, "reference_images_sha256");
  if (!s.reference_images.empty() && l.reference_images == InputUse::none)
    bad("reference_images", model_named(l) + " does not take reference images");
  if (s.reference_images.empty() && l.reference_images == InputUse::required) bad("reference_images", "required by " + model_named(l));
  if (!(s.conditioning_scale >= 0.0 && s.conditioning_scale <= 10.0))
    bad("conditioning_scale", "must be between 0 and 10 (got " + number_text(s.conditioning_scale) + ")");
  if (s.conditioning_scale != 1.0 && l.mask_video == InputUse::none && l.reference_images == InputUse::none)
    bad("conditioning_scale", model_named(l) + " takes no control input (a Wan VACE package does)");
}

// "reference_images": ["/a.png", ...]; "reference_images_sha256" the same shape.
std::vector<std::string> as_text_list(const json::value& v, std::string_view field) {
  const auto* a = v.if_array();
  if (!a) bad(field, "must be an array of strings (got " + shown(v) + ")");
  if (a->size() > 64) bad(field, "at most 64 entries");
  std::vector<std::string> out;
  for (const auto& e : *a) out.push_back(as_text(e, field));
  return out;
}

// "loras": [{"name": "x", "scale": 0.8}, ...]; scale defaults to 1.
std::vector<LoraRef> parse_loras(const json::value& v) {
  const auto* a = v.if_array();
  if (!a) bad("loras", "must be an array of {\"name\", \"scale\"} (got " + shown(v) + ")");
  if (a->size() > 8) bad("loras", "at most 8 (got " + std::to_string(a->size()) + ")");
  std::vector<LoraRef> out;
  for (std::size_t i = 0; i < a->size(); ++i) {
    const std::string field = "loras[" + std::to_string(i) + "]";
    const auto* o = (*a)[i].if_object();
    if (!o) bad(field, "must be an object {\"name\", \"scale\"} (got " + shown((*a)[i]) + ")");
    LoraRef r;
    for (const auto& kv : *o) {
      if (kv.key() == "name") r.name = checked_output_name(as_text(kv.value(), field + ".name"), (field + ".name").c_str());
      else if (kv.key() == "scale") r.scale = as_number(kv.value(), field + ".scale");
      else bad(field + "." + std::string(kv.key()), "unknown field");
    }
    if (r.name.empty()) bad(field + ".name", "is required");
    if (!(r.scale >= -10.0 && r.scale <= 10.0)) bad(field + ".scale", "must be between -10 and 10 (got " + number_text(r.scale) + ")");
    for (const auto& earlier : out)
      if (earlier.name == r.name) bad(field + ".name", "'" + r.name + "' is listed twice");
    out.push_back(std::move(r));
  }
  return out;
}

// "precision": one the package carries; an empty one is the package's default (filled from the
// defaults by parse_job_spec, so only a spec built in code reaches here with it empty).
void check_precision(const JobSpec& s, const SpecLimits& l) {
  if (s.precision.empty()) return;
  if (std::find(l.precisions.begin(), l.precisions.end(), s.precision) != l.precisions.end()) return;
  static const std::set<std::string, std::less<>> names = {"float32", "float16", "bfloat16", "int8", "fp8"};
  if (!names.count(s.precision))
    bad("precision", "unknown '" + truncate_utf8(s.precision, 40) + "' (known: float32, float16, bfloat16, int8, fp8)");
  std::string has;
  for (const auto& p : l.precisions) has += (has.empty() ? "" : ", ") + p;
  bad("precision", model_named(l) + " has no " + s.precision + " variant (" +
                       (has.empty() ? std::string("it has only its own weights") : "it has: " + has) +
                       (is_quantized_precision(s.precision) ? "; export one with --quantize " + s.precision : "") + ")");
}

// "interpolate" / "upscale": 1 (off), 2 or 4; an interpolated frame rate stays within max_fps.
void check_post(const JobSpec& s, const SpecLimits& l) {
  for (auto [field, v] : {std::pair{"interpolate", s.interpolate}, std::pair{"upscale", s.upscale}})
    if (v != 1 && v != 2 && v != 4) bad(field, "must be 1 (off), 2 or 4 (got " + std::to_string(v) + ")");
  if (s.interpolate > 1 && s.fps * s.interpolate > l.max_fps)
    bad("interpolate", "fps " + number_text(s.fps) + " x " + std::to_string(s.interpolate) + " exceeds " +
                           number_text(l.max_fps) + " fps");
}

}  // namespace

// "int8" (issue 24) and "fp8" (e4m3 Linears, issue 30) are weight variants; the rest are dtypes.
bool is_quantized_precision(std::string_view precision) { return precision == "int8" || precision == "fp8"; }

InputUse parse_input_use(std::string_view text, std::string_view field) {
  if (text == "none") return InputUse::none;
  if (text == "optional") return InputUse::optional;
  if (text == "required") return InputUse::required;
  bad(field, "must be none, optional or required (got '" + truncate_utf8(std::string(text), 40) + "')");
}

std::string checked_output_name(const std::string& name, const char* field) {
  if (name.empty() || name == "." || name == ".." || name.size() > 100 || name.front() == '.')
    bad(field, "must be 1-100 characters of [A-Za-z0-9._-], not starting with '.' (got '" + truncate_utf8(name, 40) + "')");
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') continue;
    // Show the whole character, not its first byte (the message must stay UTF-8).
    std::size_t n = 1;
    while (n < 4 && i + n < name.size() && (static_cast<unsigned char>(name[i + n]) & 0xC0) == 0x80) ++n;
    bad(field, "must not contain '" + name.substr(i, n) + "' (only [A-Za-z0-9._-]; no paths)");
  }
  return name;
}

void validate_job_spec(const JobSpec& s, const SpecLimits& l) {
  if (l.size_multiple < 1 || l.frames_step < 1)
    throw_error(ErrorKind::internal, "SpecLimits: size_multiple and frames_step must be >= 1");
  if (s.prompt.empty() || std::all_of(s.prompt.begin(), s.prompt.end(), [](unsigned char c) { return std::isspace(c); }))
    bad("prompt", "must not be empty");
  if (s.prompt.size() > l.max_prompt_bytes)
    bad("prompt", "longer than " + std::to_string(l.max_prompt_bytes) + " bytes (got " + std::to_string(s.prompt.size()) + ")");
  if (s.negative_prompt.size() > l.max_prompt_bytes)
    bad("negative_prompt", "longer than " + std::to_string(l.max_prompt_bytes) + " bytes");
  for (auto [field, v] : {std::pair{"width", s.width}, std::pair{"height", s.height}}) {
    if (v < l.min_size || v > l.max_size)
      bad(field, "must be between " + std::to_string(l.min_size) + " and " + std::to_string(l.max_size) + " (got " + std::to_string(v) + ")");
    if (v % l.size_multiple != 0)
      bad(field, "must be a multiple of " + std::to_string(l.size_multiple) + " (got " + std::to_string(v) + ")");
  }
  if (s.frames < l.min_frames || s.frames > l.max_frames || (s.frames - 1) % l.frames_step != 0)
    bad("frames", "must be " + std::to_string(l.frames_step) + "k+1 between " + std::to_string(l.min_frames) + " and " +
                      std::to_string(l.max_frames) + " (got " + std::to_string(s.frames) + ")");
  if (s.steps < 1 || s.steps > l.max_steps)
    bad("steps", "must be between 1 and " + std::to_string(l.max_steps) + " (got " + std::to_string(s.steps) + ")");
  if (!(s.guidance >= 0.0 && s.guidance <= l.max_guidance))
    bad("guidance", "must be between 0 and " + number_text(l.max_guidance) + " (got " + number_text(s.guidance) + ")");
  if (!(s.fps >= l.min_fps && s.fps <= l.max_fps))  // also NaN
    bad("fps", "must be between " + number_text(l.min_fps) + " and " + number_text(l.max_fps) + " (got " +
                   number_text(s.fps) + ")");
  if (s.seed > l.max_seed) bad("seed", "must be between 0 and " + std::to_string(l.max_seed));
  if (std::find(l.formats.begin(), l.formats.end(), s.format) == l.formats.end()) {
    std::string known;
    for (auto& f : l.formats) known += (known.empty() ? "" : ", ") + f;
    bad("format", "unknown '" + s.format + "' (known: " + known + ")");
  }
  if (!s.scheduler.empty() && !l.schedulers.empty() &&
      std::find(l.schedulers.begin(), l.schedulers.end(), s.scheduler) == l.schedulers.end())
    bad("scheduler", "unknown '" + s.scheduler + "'");
  if (!(s.step_cache >= 0.0 && s.step_cache <= l.max_step_cache))
    bad("step_cache", "must be between 0 (off) and " + number_text(l.max_step_cache) + " (got " + number_text(s.step_cache) + ")");
  if (s.priority < -Job::kMaxPriority || s.priority > Job::kMaxPriority)
    bad("priority", "must be an integer between " + std::to_string(-Job::kMaxPriority) + " and " +
                        std::to_string(Job::kMaxPriority) + " (got " + std::to_string(s.priority) + ")");
  if (!(s.shift >= 0.0 && s.shift <= l.max_shift))
    bad("shift", "must be between 0 (the package's) and " + number_text(l.max_shift) + " (got " + number_text(s.shift) + ")");
  if (!s.name.empty()) checked_output_name(s.name);
  if (!s.model.empty()) checked_output_name(s.model, "model");
  check_images(s, l);
  check_vace(s, l);
  check_precision(s, l);
  check_post(s, l);
}

JobSpec parse_job_spec(const json::value& value, const JobSpec& defaults, const SpecLimits& limits) {
  const auto* obj = value.if_object();
  if (!obj) bad("job", "must be a JSON object (got " + shown(value) + ")");
  static const std::set<std::string, std::less<>> known = {"prompt", "negative_prompt", "width", "height", "frames",
                                                          "steps", "guidance", "seed", "fps", "format", "scheduler", "name",
                                                          "model", "image", "last_image", "image_sha256",
                                                          "last_image_sha256", "loras", "step_cache", "priority", "shift",
                                                          "precision", "interpolate", "upscale", "video", "video_sha256",
                                                          "strength", "extend", "video_latents_sha256", "mask_video", "mask_video_sha256",
                                                          "reference_images", "reference_images_sha256",
                                                          "conditioning_scale"};
  for (const auto& kv : *obj)
    if (!known.count(kv.key())) bad(std::string(kv.key()), "unknown field");
  JobSpec s = defaults;
  for (const auto& kv : *obj) {
    const std::string_view k = kv.key();
    const auto& v = kv.value();
    if (k == "prompt") s.prompt = as_text(v, k);
    else if (k == "negative_prompt") s.negative_prompt = as_text(v, k);
    else if (k == "width") s.width = as_int(v, k);
    else if (k == "height") s.height = as_int(v, k);
    else if (k == "frames") s.frames = as_int(v, k);
    else if (k == "steps") s.steps = as_int(v, k);
    else if (k == "guidance") s.guidance = as_number(v, k);
    else if (k == "fps") s.fps = as_number(v, k);
    else if (k == "format") s.format = as_text(v, k);
    else if (k == "scheduler") s.scheduler = as_text(v, k);
    else if (k == "name") s.name = as_text(v, k);
    else if (k == "model") s.model = as_text(v, k);
    else if (k == "image") s.image = as_text(v, k);
    else if (k == "last_image") s.last_image = as_text(v, k);
    else if (k == "image_sha256") s.image_sha256 = as_text(v, k);
    else if (k == "last_image_sha256") s.last_image_sha256 = as_text(v, k);
    else if (k == "video") s.video = as_text(v, k);
    else if (k == "video_sha256") s.video_sha256 = as_text(v, k);
    else if (k == "strength") s.strength = as_number(v, k);
    else if (k == "video_latents_sha256") s.video_latents_sha256 = as_text(v, k);
    else if (k == "extend") {
      if (!v.is_bool()) bad("extend", "must be true or false (got " + shown(v) + ")");
      s.extend = v.get_bool();
    }
    else if (k == "mask_video") s.mask_video = as_text(v, k);
    else if (k == "mask_video_sha256") s.mask_video_sha256 = as_text(v, k);
    else if (k == "reference_images") s.reference_images = as_text_list(v, k);
    else if (k == "reference_images_sha256") s.reference_images_sha256 = as_text_list(v, k);
    else if (k == "conditioning_scale") s.conditioning_scale = as_number(v, k);
    else if (k == "loras") s.loras = parse_loras(v);
    else if (k == "step_cache") s.step_cache = as_number(v, k);
    else if (k == "priority") {
      const auto i = as_integer(v, k);
      if (i < -Job::kMaxPriority || i > Job::kMaxPriority)
        bad("priority", "must be an integer between " + std::to_string(-Job::kMaxPriority) + " and " +
                            std::to_string(Job::kMaxPriority) + " (got " + shown(v) + ")");
      s.priority = static_cast<int>(i);
    }
    else if (k == "shift") s.shift = as_number(v, k);
    else if (k == "precision") s.precision = as_text(v, k);
    else if (k == "interpolate") s.interpolate = as_int(v, k);
    else if (k == "upscale") s.upscale = as_int(v, k);
    else if (k == "seed") {
      const auto i = as_integer(v, k);
      if (i < 0) bad("seed", "must be between 0 and " + std::to_string(limits.max_seed) + " (got " + shown(v) + ")");
      s.seed = static_cast<std::uint64_t>(i);
    }
  }
  if (obj->contains("strength") && s.video.empty()) bad("strength", "needs video (strength is how far a video-to-video job departs from its input)");
  if (obj->contains("strength") && s.extend) bad("strength", "not for an extend job (it is how far a video-to-video job departs from its input)");
  validate_job_spec(s, limits);
  return s;
}

json::object to_json(const JobSpec& s) {
  json::object o{{"prompt", s.prompt},     {"negative_prompt", s.negative_prompt}, {"width", s.width},
          {"height", s.height},     {"frames", s.frames},                   {"steps", s.steps},
          {"guidance", s.guidance}, {"seed", s.seed},                       {"fps", s.fps},
          {"format", s.format},     {"scheduler", s.scheduler},             {"name", s.name}};
  if (!s.model.empty()) o["model"] = s.model;  // absent for the default model: keys stay as they were
  if (s.step_cache > 0.0) o["step_cache"] = s.step_cache;  // changes the frames; absent when off: keys stay
  if (s.priority != 0) o["priority"] = s.priority;  // scheduling only: job_content_key leaves it out
  if (s.shift > 0.0) o["shift"] = s.shift;                // the same: absent for the scheduler's own shift
  if (!s.precision.empty()) o["precision"] = s.precision;  // echoed; job_content_key keeps only a quantized one
  if (s.interpolate > 1) o["interpolate"] = s.interpolate;  // another video; absent when off: keys stay
  if (s.upscale > 1) o["upscale"] = s.upscale;
  // Absent for text-to-video jobs, so their keys stay as they were too.
  if (!s.image.empty()) o["image"] = s.image;
  if (!s.image_sha256.empty()) o["image_sha256"] = s.image_sha256;
  if (!s.last_image.empty()) o["last_image"] = s.last_image;
  if (!s.last_image_sha256.empty()) o["last_image_sha256"] = s.last_image_sha256;
  if (!s.video.empty()) {  // absent without a video: keys stay as they were
    o["video"] = s.video;
    if (!s.video_sha256.empty()) o["video_sha256"] = s.video_sha256;
    if (s.extend) o["extend"] = true;  // another video than video-to-video's, which has a strength
    else o["strength"] = s.strength;
    // Absent without kept latents: the keys of extend jobs that never had any stay as they were.
    if (s.extend && !s.video_latents_sha256.empty()) o["video_latents_sha256"] = s.video_latents_sha256;
  }
  // Wan VACE: absent without them, so other jobs' keys stay as they were.
  if (!s.mask_video.empty()) {
    o["mask_video"] = s.mask_video;
    if (!s.mask_video_sha256.empty()) o["mask_video_sha256"] = s.mask_video_sha256;
  }
  if (!s.reference_images.empty()) {
    o["reference_images"] = json::value_from(s.reference_images);
    if (!s.reference_images_sha256.empty()) o["reference_images_sha256"] = json::value_from(s.reference_images_sha256);
  }
  if (s.conditioning_scale != 1.0) o["conditioning_scale"] = s.conditioning_scale;
  if (!s.loras.empty()) {  // absent without LoRAs: keys stay as they were
    json::array a;
    for (const auto& l : s.loras) a.push_back(json::object{{"name", l.name}, {"scale", l.scale}});
    o["loras"] = std::move(a);
  }
  return o;
}

void set_output_shape(JobSpec& s, std::int64_t clip_frames, int overlap) {
  std::int64_t frames = s.frames;
  if (s.extend) frames = clip_frames > 0 ? clip_frames + s.frames - overlap : 0;
  if (frames > 0 && s.interpolate > 1) frames = (frames - 1) * s.interpolate + 1;
  s.output_frames = frames > 0 && frames <= std::numeric_limits<int>::max() ? static_cast<int>(frames) : 0;
  s.output_width = s.width * s.upscale;
  s.output_height = s.height * s.upscale;
  s.output_fps = s.fps * s.interpolate;
}

ContentKey job_content_key(const std::string& model_id, const JobSpec& spec) {
  auto fields = to_json(spec);
  fields.erase("name");
  fields.erase("priority");  // when a job runs, not what it makes
  fields.erase("model");  // the model is identified by model_id (the package's content)
  // A float precision is the package's own dtype, which model_id already names: float32 jobs
  // keep the keys they had before precisions existed. int8 renders another video.
  if (!is_quantized_precision(spec.precision)) fields.erase("precision");
  // An image is identified by its bytes; the path stays in the key only for a spec that was
  // never admitted (no hash yet), so two different files never share a key.
  if (!spec.image_sha256.empty()) fields.erase("image");
  if (!spec.last_image_sha256.empty()) fields.erase("last_image");
  if (!spec.video_sha256.empty()) fields.erase("video");
  if (!spec.mask_video_sha256.empty()) fields.erase("mask_video");
  if (!spec.reference_images_sha256.empty()) fields.erase("reference_images");
  if (!spec.loras.empty()) {  // a LoRA by its content, not its file name
    json::array a;
    for (const auto& l : spec.loras) a.push_back(json::object{{"sha256", l.sha256}, {"scale", l.scale}});
    fields["loras"] = std::move(a);
  }
  return content_key("vgen-job", boost::json::object{{"model", model_id}, {"spec", std::move(fields)}});
}

std::string precision_model_id(const std::string& package_id, const std::string& base_precision, const JobSpec& spec) {
  if (spec.precision.empty() || spec.precision == base_precision || is_quantized_precision(spec.precision)) return package_id;
  return package_id + "|precision:" + spec.precision;
}

}  // namespace vgen
