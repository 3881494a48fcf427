#include "stages/model/model_package.hpp"

#include "runtime/content_key.hpp"
#include "runtime/errors.hpp"

#include <boost/json.hpp>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <system_error>

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
  // An integer in [lo, hi], checked before any narrowing: a zero divisor or a huge size is
  // refused here, naming the field and the range, instead of failing at the first job
  // (SIGFPE on a division, bad_alloc on a buffer).
  std::int64_t integer_in(const json::object& o, std::string_view key, std::string_view where, std::int64_t lo,
                          std::int64_t hi) const {
    const auto& v = at(o, key, where);
    // Boost.JSON keeps every integer that fits in int64 as int64; a uint64 is above any bound.
    if (!(v.is_int64() && v.get_int64() >= lo && v.get_int64() <= hi))
      fail("manifest field '" + std::string(where) + std::string(key) + "' must be an integer in [" + std::to_string(lo) +
           ", " + std::to_string(hi) + "] (got " + truncate_utf8(json::serialize(v), 40) + ")");
    return v.get_int64();
  }
  int int_in(const json::object& o, std::string_view key, std::string_view where, int lo, int hi) const {
    return static_cast<int>(integer_in(o, key, where, lo, hi));
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
      if (!x.is_number() || !std::isfinite(x.to_number<double>()))
        fail("manifest field '" + std::string(where) + std::string(key) + "' must hold finite numbers");
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

// The optional preview.latent_rgb section: 3 rows of latent.channels numbers and 3 biases.
void read_preview(const Reader& r, const json::object& m, ModelPackage& p) {
  if (!m.contains("preview")) return;
  const auto& rgb = r.obj(r.obj(m, "preview"), "latent_rgb");
  const auto& rows = r.at(rgb, "weight", "preview.latent_rgb.");
  const auto shape_error = "preview.latent_rgb.weight must be 3 rows of latent.channels (" + std::to_string(p.latent_channels) +
                           ") finite numbers";
  if (!rows.is_array() || rows.get_array().size() != 3) r.fail(shape_error);
  for (const auto& row : rows.get_array()) {
    if (!row.is_array() || static_cast<int>(row.get_array().size()) != p.latent_channels) r.fail(shape_error);
    for (const auto& x : row.get_array()) {
      if (!x.is_number() || !std::isfinite(x.to_number<double>())) r.fail(shape_error);
      p.preview_weight.push_back(x.to_number<double>());
    }
  }
  p.preview_bias = r.numbers(rgb, "bias", "preview.latent_rgb.");
  if (p.preview_bias.size() != 3) r.fail("preview.latent_rgb.bias must hold 3 numbers");
}

// Bounds of the manifest's integers: generous for any real model, small enough that no
// product of them overflows an int or asks for an absurd allocation.
constexpr int kMaxTextLength = 65536;   // tokenizer.max_length (Wan: 512)
constexpr int kMaxTokenId = (1 << 24);  // pad_id / eos_id (the tokenizer checks them against its vocabulary)
constexpr int kMaxChannels = 4096;      // latent.channels (Wan: 16)
constexpr int kMaxScale = 64;           // latent.*_scale, resolution.*.multiple_of, frames.k_multiple (Wan: 4, 8, 16, 4)
constexpr int kMaxSide = 16384;         // resolution.*.min/max (pixels)
constexpr int kMaxFrames = 16384;       // frames.min/max
constexpr int kMaxSteps = 1000;         // defaults.steps (SpecLimits::max_steps)
constexpr std::int64_t kMaxComponentBytes = std::int64_t{1} << 46;  // 64 TiB: any real file

bool is_dtype(std::string_view name) { return name == "float32" || name == "float16" || name == "bfloat16"; }

// Whether `file` lies strictly inside `root`, both with every symlink resolved, compared by
// whole path components: "pkg-evil/x" is not inside "pkg" although the string starts the same,
// and a symlink inside the package that points elsewhere is outside.
bool inside(const fs::path& root, const fs::path& file, fs::path& resolved) {
  std::error_code ec;
  const auto r = fs::weakly_canonical(root, ec);
  if (ec) return false;
  resolved = fs::weakly_canonical(file, ec);
  if (ec) return false;
  auto [ri, fi] = std::mismatch(r.begin(), r.end(), resolved.begin(), resolved.end());
  // A trailing empty element ("dir/") is no component of its own.
  const bool root_consumed = ri == r.end() || (std::next(ri) == r.end() && ri->empty());
  return root_consumed && fi != resolved.end() && !fi->empty();
}

// components.<name>.compiled: {"cpu": {"backend", "file", "sha256", "bytes", "torch"?}, ...}. Its
// shape is checked here, and that each file stays inside the package; the files themselves only
// when a device of that type loads them (a bad one falls back to the component's own file).
void read_compiled(const Reader& r, const json::value& v, const std::string& where, ModelComponent& c) {
  if (!v.is_object()) r.fail("manifest field '" + where + "' must be an object");
  for (const auto& kv : v.get_object()) {
    const std::string type(kv.key()), at = where + "." + truncate_utf8(type, 40) + ".";
    if (type != "cpu" && type != "cuda") r.fail("manifest field '" + where + "' names an unknown device type '" + truncate_utf8(type, 40) + "' (cpu, cuda)");
    if (!kv.value().is_object()) r.fail("manifest field '" + at.substr(0, at.size() - 1) + "' must be an object");
    const auto& e = kv.value().get_object();
    CompiledComponent cc;
    cc.backend = r.str(e, "backend", at);
    const auto file = r.str(e, "file", at);
    cc.sha256 = r.str(e, "sha256", at);
    cc.bytes = static_cast<std::uint64_t>(r.integer_in(e, "bytes", at, 0, kMaxComponentBytes));
    if (e.contains("torch")) cc.torch = r.str(e, "torch", at);
    if (!inside(r.dir, r.dir / file, cc.file)) r.fail(at + "file '" + truncate_utf8(file, 200) + "' escapes the package (symlinks resolved)");
    c.compiled.emplace(type, std::move(cc));
  }
}

// The smallest multiple of `step` that is >= `value` (value, step >= 1; no overflow: both bounded).
int round_up(int value, int step) { return (value + step - 1) / step * step; }

// The base precision and the optional "precisions" section:
//   {"default": "int8", "variants": {"int8": {"transformer": "transformer_int8", ...}}}
// Every replacement names a listed component that differs from the one it replaces.
void read_precisions(const Reader& r, const json::object& m, ModelPackage& p) {
  const auto& comps = r.obj(m, "components");
  const auto& t = comps.at("transformer").get_object();  // checked by the caller
  p.base_precision = p.dtype;
  if (const auto* q = t.if_contains("quantization")) {
    if (!q->is_string() || (q->get_string() != "int8-dynamic" && q->get_string() != "fp8-e4m3"))
      r.fail("manifest field 'components.transformer.quantization' must be \"int8-dynamic\" or \"fp8-e4m3\"");
    p.base_precision = q->get_string() == "fp8-e4m3" ? "fp8" : "int8";
  }
  p.limits.precisions = {p.base_precision};
  p.defaults.precision = p.base_precision;
  const auto* sec = m.if_contains("precisions");
  if (!sec) return;
  if (!sec->is_object()) r.fail("manifest field 'precisions' must be an object");
  const auto& o = sec->get_object();
  for (const auto& kv : o)
    if (kv.key() != "default" && kv.key() != "variants")
      r.fail("manifest field 'precisions." + truncate_utf8(std::string(kv.key()), 40) + "' is unknown");
  if (o.contains("variants")) {
    const auto& variants = r.obj(o, "variants");
    for (const auto& v : variants) {
      const std::string name(v.key()), where = "precisions.variants." + truncate_utf8(name, 40);
      if (name != "int8" && name != "fp8" && !is_dtype(name))
        r.fail("manifest field '" + where + "' names no precision (float32, float16, bfloat16, int8, fp8)");
      if (name == p.base_precision) r.fail("manifest field '" + where + "' repeats the base precision");
      if (!v.value().is_object() || v.value().get_object().empty())
        r.fail("manifest field '" + where + "' must map components to their variants");
      auto& map = p.precision_variants[name];
      for (const auto& c : v.value().get_object()) {
        const std::string from(c.key());
        if (!c.value().is_string()) r.fail("manifest field '" + where + "." + from + "' must be a component name");
        const std::string to(c.value().get_string());
        if (!comps.contains(from) || !comps.contains(to) || from == to)
          r.fail("manifest field '" + where + "." + from + "' must map a listed component onto another listed one (got '" +
                 truncate_utf8(to, 40) + "')");
        map.emplace(from, to);
      }
      p.limits.precisions.push_back(name);
    }
  }
  if (o.contains("default")) {
    p.defaults.precision = r.str(o, "default", "precisions.");
    if (std::find(p.limits.precisions.begin(), p.limits.precisions.end(), p.defaults.precision) == p.limits.precisions.end())
      r.fail("manifest field 'precisions.default' ('" + truncate_utf8(p.defaults.precision, 40) + "') is not a precision the package carries");
  }
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

const std::string& ModelPackage::component_for(const std::string& name, const std::string& precision) const {
  const auto v = precision_variants.find(precision);
  if (v == precision_variants.end()) return name;
  const auto c = v->second.find(name);
  return c == v->second.end() ? name : c->second;
}

std::string ModelPackage::id() const { return identity.empty() ? component("transformer").sha256 : identity; }

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
  if (!is_dtype(p.dtype)) r.fail("manifest field 'dtype' must be float32, float16 or bfloat16 (got '" + truncate_utf8(p.dtype, 40) + "')");

  const auto& comps = r.obj(m, "components");
  // Every component listed is checked; which ones a package needs is its family's business
  // (stages/family.hpp), except the transformer, whose hash is part of the package's identity.
  if (!comps.if_contains("transformer")) r.fail("manifest lacks component 'transformer'");
  for (const auto& kv : comps) {
    const std::string name(kv.key());
    if (!kv.value().is_object()) r.fail("manifest component '" + truncate_utf8(name, 40) + "' must be an object");
    const auto& e = kv.value().get_object();
    const std::string where = std::string("components.") + name + ".";
    ModelComponent c;
    const auto file = r.str(e, "file", where);
    c.sha256 = r.str(e, "sha256", where);
    c.bytes = static_cast<std::uint64_t>(r.integer_in(e, "bytes", where, 0, kMaxComponentBytes));
    c.format = r.str(e, "format", where);
    c.dtype = e.if_contains("dtype") ? r.str(e, "dtype", where) : p.dtype;
    if (!is_dtype(c.dtype)) r.fail("manifest field '" + where + "dtype' must be float32, float16 or bfloat16");
    // Keep the resolved path: the file checked here is the file the backend loads.
    if (!inside(r.dir, r.dir / file, c.file))
      r.fail(where + "file '" + truncate_utf8(file, 200) + "' escapes the package (symlinks resolved)");
    if (!fs::is_regular_file(c.file)) r.fail(std::string("component '") + name + "' file " + c.file.filename().string() + " is missing");
    if (fs::file_size(c.file) != c.bytes)
      r.fail(std::string("component '") + name + "' file " + c.file.filename().string() + " has " +
             std::to_string(fs::file_size(c.file)) + " bytes, the manifest says " + std::to_string(c.bytes) + " (truncated or replaced)");
    if (c.bytes <= options.verify_limit && sha256_file(c.file) != c.sha256)
      r.fail(std::string("component '") + name + "' file " + c.file.filename().string() + " is corrupt (sha256 mismatch)");
    if (const auto* compiled = e.if_contains("compiled")) read_compiled(r, *compiled, where + "compiled", c);
    p.components.emplace(name, std::move(c));
  }

  const auto& tok = r.obj(m, "tokenizer");
  p.max_length = r.int_in(tok, "max_length", "tokenizer.", 2, kMaxTextLength);  // a token and EOS at least
  p.pad_id = r.int_in(tok, "pad_id", "tokenizer.", 0, kMaxTokenId);
  p.eos_id = r.int_in(tok, "eos_id", "tokenizer.", 0, kMaxTokenId);
  if (const auto* a = tok.if_contains("add_eos"); a && a->is_bool()) p.add_eos = a->get_bool();

  const auto& sch = r.obj(m, "scheduler");
  p.scheduler_type = r.str(sch, "type", "scheduler.");
  p.scheduler_config = r.obj(sch, "config");

  const auto& lat = r.obj(m, "latent");
  p.latent_channels = r.int_in(lat, "channels", "latent.", 1, kMaxChannels);
  p.temporal_scale = r.int_in(lat, "temporal_scale", "latent.", 1, kMaxScale);
  p.spatial_scale = r.int_in(lat, "spatial_scale", "latent.", 1, kMaxScale);
  p.latents_mean = r.numbers(lat, "latents_mean", "latent.");
  p.latents_std = r.numbers(lat, "latents_std", "latent.");
  if (static_cast<int>(p.latents_mean.size()) != p.latent_channels || static_cast<int>(p.latents_std.size()) != p.latent_channels)
    r.fail("latent.latents_mean/std must have one value per latent channel");
  for (double s : p.latents_std)
    if (!(s > 0.0)) r.fail("latent.latents_std must be positive");

  read_preview(r, m, p);
  read_precisions(r, m, p);

  const auto& res = r.obj(m, "resolution");
  const auto& h = r.obj(res, "height");
  const auto& w = r.obj(res, "width");
  const int multiple = r.int_in(h, "multiple_of", "resolution.height.", 1, kMaxScale * kMaxScale);
  if (r.int_in(w, "multiple_of", "resolution.width.", 1, kMaxScale * kMaxScale) != multiple)
    r.fail("resolution.width.multiple_of must equal resolution.height.multiple_of (vgen has one size multiple)");
  if (multiple % p.spatial_scale != 0)
    r.fail("resolution.*.multiple_of (" + std::to_string(multiple) + ") must be a multiple of latent.spatial_scale (" +
           std::to_string(p.spatial_scale) + ")");
  p.limits.size_multiple = multiple;
  p.limits.min_size = std::max(r.int_in(h, "min", "resolution.height.", 1, kMaxSide), r.int_in(w, "min", "resolution.width.", 1, kMaxSide));
  p.limits.max_size = std::min(r.int_in(h, "max", "resolution.height.", 1, kMaxSide), r.int_in(w, "max", "resolution.width.", 1, kMaxSide));
  if (round_up(p.limits.min_size, multiple) > p.limits.max_size)
    r.fail("resolution allows no size: no multiple of " + std::to_string(multiple) + " between " +
           std::to_string(p.limits.min_size) + " and " + std::to_string(p.limits.max_size));

  const auto& fr = r.obj(m, "frames");
  p.limits.frames_step = r.int_in(fr, "k_multiple", "frames.", 1, kMaxScale);
  if (p.limits.frames_step % p.temporal_scale != 0)
    r.fail("frames.k_multiple (" + std::to_string(p.limits.frames_step) + ") must be a multiple of latent.temporal_scale (" +
           std::to_string(p.temporal_scale) + ")");
  p.limits.min_frames = r.int_in(fr, "min", "frames.", 1, kMaxFrames);
  p.limits.max_frames = r.int_in(fr, "max", "frames.", 1, kMaxFrames);
  if (round_up(p.limits.min_frames - 1, p.limits.frames_step) + 1 > p.limits.max_frames)
    r.fail("frames allows no count: no " + std::to_string(p.limits.frames_step) + "k+1 between " +
           std::to_string(p.limits.min_frames) + " and " + std::to_string(p.limits.max_frames));

  // Image inputs (absent in text-to-video packages: none). The family decides what it does
  // with them; the generic validation refuses a job that gives one the package does not take.
  if (const auto* in = m.if_contains("inputs")) {
    if (!in->is_object()) r.fail("manifest field 'inputs' must be an object");
    const auto& inputs = in->get_object();
    for (const auto& kv : inputs)
      if (kv.key() != "image" && kv.key() != "last_image" && kv.key() != "video" && kv.key() != "mask_video" &&
          kv.key() != "reference_images")
        r.fail("manifest field 'inputs." + truncate_utf8(std::string(kv.key()), 40) + "' is unknown");
    try {
      if (inputs.contains("image")) p.limits.image = parse_input_use(r.str(inputs, "image", "inputs."), "inputs.image");
      if (inputs.contains("last_image"))
        p.limits.last_image = parse_input_use(r.str(inputs, "last_image", "inputs."), "inputs.last_image");
      if (inputs.contains("video")) p.limits.video = parse_input_use(r.str(inputs, "video", "inputs."), "inputs.video");
      if (inputs.contains("mask_video"))
        p.limits.mask_video = parse_input_use(r.str(inputs, "mask_video", "inputs."), "inputs.mask_video");
      if (inputs.contains("reference_images"))
        p.limits.reference_images = parse_input_use(r.str(inputs, "reference_images", "inputs."), "inputs.reference_images");
    } catch (const Error& e) {
      r.fail(std::string("manifest field ") + e.what());
    }
    if (p.limits.last_image == InputUse::required) r.fail("manifest field inputs.last_image cannot be required (only none or optional)");
    if (p.limits.last_image != InputUse::none && p.limits.image == InputUse::none)
      r.fail("manifest field inputs.last_image needs inputs.image (the first frame) as well");
    if (p.limits.mask_video != InputUse::none && p.limits.video == InputUse::none)
      r.fail("manifest field inputs.mask_video needs inputs.video (the control video it masks) as well");
  }
  // Extension by latents (a diffusion-forcing package; SpecLimits::extend_overlap).
  if (const auto* ext = m.if_contains("extension")) {
    if (!ext->is_object()) r.fail("manifest field 'extension' must be an object");
    p.limits.extend_overlap = r.int_in(ext->get_object(), "overlap_frames", "extension.", 1, kMaxFrames);
    if ((p.limits.extend_overlap - 1) % p.limits.frames_step != 0)
      r.fail("manifest field extension.overlap_frames must be " + std::to_string(p.limits.frames_step) + "k+1");
    if (p.limits.video == InputUse::none) r.fail("manifest field extension needs inputs.video (the clip's frames are its input)");
  }
  // The name the default model answers to; a runtime serving it under another name sets its own.
  p.limits.model_name = (r.dir.has_filename() ? r.dir : r.dir.parent_path()).filename().string();

  const auto& d = r.obj(m, "defaults");
  p.defaults.steps = r.int_in(d, "steps", "defaults.", 1, kMaxSteps);
  p.defaults.guidance = r.number(d, "guidance_scale", "defaults.");
  p.defaults.height = r.int_in(d, "height", "defaults.", 1, kMaxSide);
  p.defaults.width = r.int_in(d, "width", "defaults.", 1, kMaxSide);
  p.defaults.frames = r.int_in(d, "frames", "defaults.", 1, kMaxFrames);
  p.defaults.fps = r.number(d, "fps", "defaults.");
  p.defaults.negative_prompt = r.str(d, "negative_prompt", "defaults.");
  // Optional: the step-cache threshold this package suggests (stages/step_cache.hpp).
  if (d.contains("step_cache")) p.defaults.step_cache = r.number(d, "step_cache", "defaults.");
  // Optional: the flow shift this package suggests over its scheduler config's (issue 22: a
  // few-step package; a LoRA's or the job's own shift overrides it).
  if (d.contains("shift")) p.defaults.shift = r.number(d, "shift", "defaults.");
  // A job that omits a field takes the default: a default outside the package's own limits
  // would reject that job for a field it never sent.
  JobSpec probe = p.defaults;
  probe.prompt = "x";
  if (p.limits.image == InputUse::required) probe.image = "/image.png";
  if (p.limits.video == InputUse::required) probe.video = "/video.mp4";
  if (p.limits.mask_video == InputUse::required) probe.video = "/video.mp4", probe.mask_video = "/mask.mp4";
  if (p.limits.reference_images == InputUse::required) probe.reference_images = {"/reference.png"};
  try {
    validate_job_spec(probe, p.limits);
  } catch (const Error& e) {
    r.fail(std::string("manifest defaults: ") + e.what());
  }
  // The whole manifest identifies the model: two packages that share a transformer but differ
  // in family, scheduler, VAE or anything else render different videos.
  p.identity = content_key("model-package", m).hex();
  p.manifest = m;
  return p;
}

}  // namespace vgen
