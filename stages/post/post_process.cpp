#include "stages/post/post_process.hpp"

#include "runtime/errors.hpp"

#include <boost/json/parse.hpp>

#include <fstream>
#include <sstream>

namespace vgen {

std::string_view to_string(PostKind kind) { return kind == PostKind::interpolate ? "interpolate" : "upscale"; }

Registry<PostFactory>& post_processors() {
  static Registry<PostFactory> registry("post-stage variant");
  return registry;
}

std::shared_ptr<const PostProcessor> make_post_processor(PostKind kind, const PostOptions& options) {
  std::string name = kind == PostKind::interpolate ? options.interpolator : options.upscaler;
  if (name.empty() && kind == PostKind::interpolate) name = options.interpolate_model.empty() ? "minterpolate" : "rife";
  if (name.empty()) name = options.upscale_model.empty() ? "lanczos" : "realesrgan";
  auto made = post_processors().get(name)(options);
  if (!made) throw_error(ErrorKind::internal, "post-stage variant '" + name + "' made nothing");
  if (made->kind() != kind)
    throw_error(ErrorKind::invalid_argument, "post." + std::string(kind == PostKind::interpolate ? "interpolator" : "upscaler") +
                                                 ": '" + name + "' is a " + std::string(to_string(made->kind())) + " variant");
  return made;
}

void check_post_job(const JobSpec& spec, const PostOptions& options) {
  if (spec.upscale <= 1) return;
  const auto side = static_cast<long long>(std::max(spec.width, spec.height)) * spec.upscale;
  if (side > options.max_side)
    throw_error(ErrorKind::invalid_argument,
                "upscale: " + std::to_string(spec.width) + "x" + std::to_string(spec.height) + " upscaled " +
                    std::to_string(spec.upscale) + "x is " + std::to_string(side) + " pixels on its longest side, past the frame-size limit of " +
                    std::to_string(options.max_side) + " (post.max_side)");
}

void check_post_output(const PostProcessor& p, const VideoFrames& in, int factor, const VideoFrames& out) {
  const bool up = p.kind() == PostKind::upscale;
  const int w = up ? in.width * factor : in.width, h = up ? in.height * factor : in.height;
  const int count = up ? in.count : (in.count - 1) * factor + 1;
  const double fps = up ? in.fps : in.fps * factor;
  if (out.width != w || out.height != h || out.count != count || out.fps != fps)
    throw_error(ErrorKind::internal, p.name() + " made " + std::to_string(out.width) + "x" + std::to_string(out.height) + ", " +
                                         std::to_string(out.count) + " frames; expected " + std::to_string(w) + "x" +
                                         std::to_string(h) + ", " + std::to_string(count) + " frames");
}

std::string PostManifest::text(const char* key) const {
  const auto* v = fields.if_contains(key);
  if (!v || !v->is_string()) bad(std::string(key) + ": missing or not a string");
  return std::string(v->get_string());
}

void PostManifest::bad(const std::string& what) const {
  throw_error(ErrorKind::invalid_argument, "post package " + file.string() + ": " + what);
}

PostManifest read_post_manifest(const std::filesystem::path& dir, const std::string& variant, const std::string& architecture,
                                const std::string& export_flag) {
  PostManifest m;
  m.file = dir / "manifest.json";
  std::ifstream in(m.file);
  if (!in) throw_error(ErrorKind::not_found, "post package: no " + m.file.string() + " (export one with python -m vgen_export.post " + export_flag + ")");
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  auto doc = boost::json::parse(text.str(), ec);
  if (ec || !doc.is_object()) m.bad("not a JSON object");
  m.fields = std::move(doc.as_object());
  if (m.text("kind") != "post") m.bad("kind: must be \"post\"");
  if (const auto got = m.text("variant"); got != variant) m.bad("variant: must be \"" + variant + "\" (got \"" + got + "\")");
  if (m.text("architecture") != architecture) m.bad("architecture: must be \"" + architecture + "\"");
  const auto module = m.text("module");
  if (module.empty() || module.find('/') != std::string::npos || module.front() == '.') m.bad("module: must be a file name");
  m.module = dir / module;
  return m;
}

void PostManifest::require_module() const {
  if (!std::filesystem::is_regular_file(module)) throw_error(ErrorKind::not_found, "post package: no " + module.string());
}

}  // namespace vgen
