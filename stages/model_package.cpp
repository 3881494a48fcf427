#include "stages/model_package.hpp"

#include "runtime/errors.hpp"

#include <boost/json.hpp>
#include <openssl/evp.h>

#include <array>
#include <fstream>
#include <memory>
#include <sstream>

namespace vgen {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

struct Reader {
  fs::path dir;
  [[noreturn]] void fail(const std::string& what) const {
    throw_error(ErrorKind::invalid_argument, "model package '" + dir.string() + "': " + what);
  }
  const json::value& at(const json::object& o, std::string_view key, std::string_view where) const {
    const auto* v = o.if_contains(key);
    if (!v) fail("manifest lacks " + std::string(where) + std::string(key));
    return *v;
  }
  const json::object& obj(const json::object& o, std::string_view key) const {
    const auto& v = at(o, key, "");
    if (!v.is_object()) fail("manifest field '" + std::string(key) + "' must be an object");
    return v.get_object();
  }
  std::string str(const json::object& o, std::string_view key, std::string_view where = "") const {
    const auto& v = at(o, key, where);
    if (!v.is_string()) fail("manifest field '" + std::string(where) + std::string(key) + "' must be a string");
    return std::string(v.get_string());
  }
  std::int64_t integer(const json::object& o, std::string_view key, std::string_view where = "") const {
    const auto& v = at(o, key, where);
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64()) return static_cast<std::int64_t>(v.get_uint64());
    fail("manifest field '" + std::string(where) + std::string(key) + "' must be an integer");
  }
  double number(const json::object& o, std::string_view key, std::string_view where = "") const {
    const auto& v = at(o, key, where);
    if (v.is_number()) return v.to_number<double>();
    fail("manifest field '" + std::string(where) + std::string(key) + "' must be a number");
  }
  std::vector<double> numbers(const json::object& o, std::string_view key, std::string_view where) const {
    const auto& v = at(o, key, where);
    if (!v.is_array()) fail("manifest field '" + std::string(where) + std::string(key) + "' must be an array");
    std::vector<double> out;
    for (const auto& x : v.get_array()) {
      if (!x.is_number()) fail("manifest field '" + std::string(where) + std::string(key) + "' must hold numbers");
      out.push_back(x.to_number<double>());
    }
    return out;
  }
};

json::object read_manifest(const Reader& r) {
  const auto path = r.dir / "manifest.json";
  if (!fs::is_directory(r.dir)) r.fail("is not a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) r.fail("has no manifest.json");
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  auto v = json::parse(text.str(), ec);
  if (ec) r.fail("manifest.json is not valid JSON (" + ec.message() + ")");
  if (!v.is_object()) r.fail("manifest.json must hold a JSON object");
  return std::move(v.get_object());
}

}  // namespace

std::string sha256_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw_error(ErrorKind::invalid_argument, "cannot read '" + file.string() + "'");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw_error(ErrorKind::internal, "sha256 init failed");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0 && EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(in.gcount())) != 1)
      throw_error(ErrorKind::internal, "sha256 update failed");
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md.data(), &n) != 1) throw_error(ErrorKind::internal, "sha256 final failed");
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

const ModelComponent& ModelPackage::component(const std::string& name) const {
  auto it = components.find(name);
  if (it == components.end()) throw_error(ErrorKind::invalid_argument, "model package has no component '" + name + "'");
  return it->second;
}

std::string ModelPackage::id() const { return component("transformer").sha256; }

ModelPackage load_model_package(const fs::path& dir, const PackageLoadOptions& options) {
  Reader r{fs::absolute(dir).lexically_normal()};
  const auto m = read_manifest(r);
  if (r.str(m, "format") != "vgen-model-package") r.fail("manifest format is not 'vgen-model-package'");
  const auto version = r.integer(m, "format_version");
  if (version != kModelPackageFormatVersion)
    r.fail("unsupported manifest format_version " + std::to_string(version) + " (this vgen reads " +
           std::to_string(kModelPackageFormatVersion) + ")");
  ModelPackage p;
  p.dir = r.dir;
  p.family = r.str(m, "family");
  p.dtype = r.str(m, "dtype");

  const auto& comps = r.obj(m, "components");
  for (const char* name : {"tokenizer", "text_encoder", "transformer", "vae_decoder"}) {
    const auto* entry = comps.if_contains(name);
    if (!entry || !entry->is_object()) r.fail(std::string("manifest lacks component '") + name + "'");
    const auto& e = entry->get_object();
    const std::string where = std::string("components.") + name + ".";
    ModelComponent c;
    c.file = r.dir / r.str(e, "file", where);
    c.sha256 = r.str(e, "sha256", where);
    c.bytes = static_cast<std::uint64_t>(r.integer(e, "bytes", where));
    c.format = r.str(e, "format", where);
    c.dtype = e.if_contains("dtype") ? r.str(e, "dtype", where) : p.dtype;
    if (c.file.lexically_normal().string().rfind(r.dir.string(), 0) != 0) r.fail(where + "file escapes the package");
    if (!fs::is_regular_file(c.file)) r.fail(std::string("component '") + name + "' file " + c.file.filename().string() + " is missing");
    if (fs::file_size(c.file) != c.bytes)
      r.fail(std::string("component '") + name + "' file " + c.file.filename().string() + " has " +
             std::to_string(fs::file_size(c.file)) + " bytes, the manifest says " + std::to_string(c.bytes) + " (truncated or replaced)");
    if (c.bytes <= options.verify_limit && sha256_file(c.file) != c.sha256)
      r.fail(std::string("component '") + name + "' file " + c.file.filename().string() + " is corrupt (sha256 mismatch)");
    p.components.emplace(name, std::move(c));
  }

  const auto& tok = r.obj(m, "tokenizer");
  p.max_length = static_cast<int>(r.integer(tok, "max_length", "tokenizer."));
  p.pad_id = static_cast<int>(r.integer(tok, "pad_id", "tokenizer."));
  p.eos_id = static_cast<int>(r.integer(tok, "eos_id", "tokenizer."));
  if (const auto* a = tok.if_contains("add_eos"); a && a->is_bool()) p.add_eos = a->get_bool();
  // Optional flags (absent in older packages): false unless the manifest says true.
  auto flag = [&m](const char* section, const char* key) {
    const auto* s = m.if_contains(section);
    const auto* a = s && s->is_object() ? s->get_object().if_contains(key) : nullptr;
    return a && a->is_bool() && a->get_bool();
  };
  p.text_padding_invariant = flag("text_encoder", "padding_invariant");
  p.text_output_masked = flag("text_encoder", "output_masked");
  // The compact path also needs the method itself in the manifest's list for the transformer.
  bool has_compact_method = false;
  if (const auto* t = comps.if_contains("transformer"); t && t->is_object())
    if (const auto* methods = t->get_object().if_contains("methods"); methods && methods->is_array())
      for (const auto& name : methods->get_array()) has_compact_method |= name.is_string() && name.get_string() == "forward_compact";
  p.transformer_compact_context = p.text_output_masked && has_compact_method && flag("transformer", "compact_context");

  const auto& sch = r.obj(m, "scheduler");
  p.scheduler_type = r.str(sch, "type", "scheduler.");
  p.scheduler_config = r.obj(sch, "config");

  const auto& lat = r.obj(m, "latent");
  p.latent_channels = static_cast<int>(r.integer(lat, "channels", "latent."));
  p.temporal_scale = static_cast<int>(r.integer(lat, "temporal_scale", "latent."));
  p.spatial_scale = static_cast<int>(r.integer(lat, "spatial_scale", "latent."));
  p.latents_mean = r.numbers(lat, "latents_mean", "latent.");
  p.latents_std = r.numbers(lat, "latents_std", "latent.");
  if (static_cast<int>(p.latents_mean.size()) != p.latent_channels || static_cast<int>(p.latents_std.size()) != p.latent_channels)
    r.fail("latent.latents_mean/std must have one value per latent channel");

  const auto& res = r.obj(m, "resolution");
  const auto& h = r.obj(res, "height");
  const auto& w = r.obj(res, "width");
  p.limits.size_multiple = static_cast<int>(r.integer(h, "multiple_of", "resolution.height."));
  p.limits.min_size = static_cast<int>(std::max(r.integer(h, "min", "resolution.height."), r.integer(w, "min", "resolution.width.")));
  p.limits.max_size = static_cast<int>(std::min(r.integer(h, "max", "resolution.height."), r.integer(w, "max", "resolution.width.")));
  const auto& fr = r.obj(m, "frames");
  p.limits.frames_step = static_cast<int>(r.integer(fr, "k_multiple", "frames."));
  p.limits.min_frames = static_cast<int>(r.integer(fr, "min", "frames."));
  p.limits.max_frames = static_cast<int>(r.integer(fr, "max", "frames."));

  const auto& d = r.obj(m, "defaults");
  p.defaults.steps = static_cast<int>(r.integer(d, "steps", "defaults."));
  p.defaults.guidance = r.number(d, "guidance_scale", "defaults.");
  p.defaults.height = static_cast<int>(r.integer(d, "height", "defaults."));
  p.defaults.width = static_cast<int>(r.integer(d, "width", "defaults."));
  p.defaults.frames = static_cast<int>(r.integer(d, "frames", "defaults."));
  p.defaults.fps = r.number(d, "fps", "defaults.");
  p.defaults.negative_prompt = r.str(d, "negative_prompt", "defaults.");
  return p;
}

}  // namespace vgen
