#include "stages/families/hunyuan15/hunyuan15_family.hpp"

#include "runtime/errors.hpp"
#include "stages/families/family_kit.hpp"
#include "stages/families/hunyuan15/hunyuan15_i2v.hpp"
#include "stages/text/text_lookup.hpp"
#include "stages/model/cuda_graph_calls.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <boost/json.hpp>

#include <algorithm>
#include <cmath>

namespace vgen {

namespace json = boost::json;

namespace {

Hunyuan15Job& hy(FamilyJob& job) { return static_cast<Hunyuan15Job&>(job); }

[[noreturn]] void bad_manifest(const ModelPackage& p, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, "model package '" + p.dir.string() + "': " + what);
}

const json::object& section(const ModelPackage& p, const json::object& o, const char* name, const std::string& where) {
  const auto* v = o.if_contains(name);
  if (!v || !v->is_object()) bad_manifest(p, "manifest lacks the object '" + where + name + "'");
  return v->get_object();
}

std::string text_field(const ModelPackage& p, const json::object& o, const char* key, const std::string& where) {
  const auto* v = o.if_contains(key);
  if (!v || !v->is_string()) bad_manifest(p, "manifest field '" + where + key + "' must be a string");
  return std::string(v->get_string());
}

int int_field(const ModelPackage& p, const json::object& o, const char* key, const std::string& where, int lo, int hi) {
  const auto* v = o.if_contains(key);
  if (!v || !v->is_int64() || v->get_int64() < lo || v->get_int64() > hi)
    bad_manifest(p, "manifest field '" + where + key + "' must be an integer in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "]");
  return static_cast<int>(v->get_int64());
}

// A glyph text keys the shared text cache apart from prompts (which never start with \x01).
std::string glyph_key(const std::string& glyph) { return std::string("\x01" "byt5\x01") + glyph; }

std::array<std::int64_t, 3> latent_grid(const JobSpec& spec, const ModelPackage& p) {
  return {(spec.frames - 1) / p.temporal_scale + 1, spec.height / p.spatial_scale, spec.width / p.spatial_scale};
}

}  // namespace

Hunyuan15Config read_hunyuan15_config(const ModelPackage& p) { return read_hunyuan15_config(p, p.manifest); }

Hunyuan15Config read_hunyuan15_config(const ModelPackage& p, const json::object& manifest) {
  Hunyuan15Config c;
  const auto& t = section(p, manifest, "text", "");
  c.template_text = text_field(p, t, "template", "text.");
  if (c.template_text.find("{system}") == std::string::npos || c.template_text.find("{prompt}") == std::string::npos)
    bad_manifest(p, "manifest field 'text.template' must contain {system} and {prompt}");
  c.system_message = text_field(p, t, "system_message", "text.");
  c.crop_start = int_field(p, t, "crop_start", "text.", 0, 4096);
  c.max_length = int_field(p, t, "max_length", "text.", 1, 65536);
  const auto& b = section(p, t, "byt5", "text.");
  c.glyph_length = int_field(p, b, "max_length", "text.byt5.", 2, 65536);
  c.glyph_offset = int_field(p, b, "offset", "text.byt5.", 0, 1 << 20);
  c.glyph_eos = int_field(p, b, "eos_id", "text.byt5.", 0, 1 << 20);
  c.glyph_pad = int_field(p, b, "pad_id", "text.byt5.", 0, 1 << 20);
  c.glyph_dim = int_field(p, b, "output_dim", "text.byt5.", 1, 1 << 20);
  const auto& v = section(p, manifest, "vae", "");
  const auto* s = v.if_contains("scaling_factor");
  if (!s || !s->is_number() || !(s->to_number<double>() > 0) || !std::isfinite(s->to_number<double>()))
    bad_manifest(p, "manifest field 'vae.scaling_factor' must be a positive number");
  c.scaling_factor = s->to_number<double>();
  const auto* tr = manifest.if_contains("transformer");
  if (tr && tr->is_object())
    for (const char* key : {"patch_size", "patch_size_t"})
      if (const auto* ps = tr->get_object().if_contains(key); ps && !(ps->is_int64() && ps->get_int64() == 1))
        bad_manifest(p, std::string("manifest field 'transformer.") + key + "' must be 1 (the exporter's modules)");
  return c;
}

std::optional<std::string> hunyuan15_glyph_text(const std::string& prompt) {
  static const std::string open2 = "\xE2\x80\x9C", close2 = "\xE2\x80\x9D";  // “ ”
  std::vector<std::string> found;
  for (std::size_t i = 0; i < prompt.size();) {
    // At i: "(.*?)" or “(.*?)”, where . is anything but a line break (Python's re).
    std::string_view close;
    std::size_t body = 0;
    if (prompt[i] == '"') {
      close = "\"", body = i + 1;
    } else if (prompt.compare(i, open2.size(), open2) == 0) {
      close = close2, body = i + open2.size();
    }
    if (!close.empty()) {
      const auto end = prompt.find(close, body);
      const auto line = prompt.find('\n', body);
      if (end != std::string::npos && (line == std::string::npos || line > end)) {
        found.push_back(prompt.substr(body, end - body));
        i = end + close.size();
        continue;
      }
    }
    ++i;
  }
  if (found.empty()) return std::nullopt;
  if (found.size() > 1) {  // list(dict.fromkeys(result))
    std::vector<std::string> unique;
    for (auto& f : found)
      if (std::find(unique.begin(), unique.end(), f) == unique.end()) unique.push_back(std::move(f));
    found = std::move(unique);
  }
  std::string out;
  for (std::size_t k = 0; k < found.size(); ++k) out += (k ? ". " : "") + std::string("Text \"") + found[k] + "\"";
  return out + ". ";
}

void byt5_ids(const std::string& text, int length, int offset, int eos, int pad, std::int64_t* ids, float* mask) {
  // ByT5Tokenizer's added tokens are cut out of the text first: <pad>, </s>, <unk> (which strip
  // the whitespace around them) and <extra_id_0..124> (which do not).
  std::vector<std::int64_t> out;
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  const auto byte_space = [&](std::int64_t id) { return id >= offset && id < offset + 256 && space(static_cast<char>(id - offset)); };
  const std::pair<std::string_view, int> stripping[] = {{"<pad>", pad}, {"</s>", eos}, {"<unk>", offset - 1}};
  for (std::size_t i = 0; i < text.size();) {
    std::int64_t id = -1;
    std::size_t len = 0;
    bool strip = false;
    for (const auto& [token, token_id] : stripping)
      if (text.compare(i, token.size(), token) == 0) id = token_id, len = token.size(), strip = true;
    static constexpr std::string_view extra = "<extra_id_";
    if (id < 0 && text.compare(i, extra.size(), extra) == 0) {
      std::size_t k = i + extra.size();
      int n = 0, digits = 0;
      while (k < text.size() && text[k] >= '0' && text[k] <= '9' && digits < 4) n = n * 10 + (text[k++] - '0'), ++digits;
      const bool canonical = digits > 0 && (digits == 1 || text[i + extra.size()] != '0');
      if (canonical && n < 125 && k < text.size() && text[k] == '>') id = offset + 256 + n, len = k + 1 - i;
    }
    if (id < 0) {
      out.push_back(static_cast<unsigned char>(text[i++]) + offset);
      continue;
    }
    if (strip)
      while (!out.empty() && byte_space(out.back())) out.pop_back();
    out.push_back(id);
    i += len;
    if (strip)
      while (i < text.size() && space(text[i])) ++i;
  }
  const auto n = std::min<std::size_t>(out.size(), static_cast<std::size_t>(length - 1));
  for (int i = 0; i < length; ++i) ids[i] = pad, mask[i] = 0.0f;
  for (std::size_t i = 0; i < n; ++i) ids[i] = out[i], mask[i] = 1.0f;
  ids[n] = eos, mask[n] = 1.0f;
}

bool hunyuan15_uses_guidance(double g) { return !(std::abs(g - 1.0) <= 1e-9 * std::max(std::abs(g), 1.0)); }

Hunyuan15Family::Hunyuan15Family(ModelPackage package, const FamilyOptions& options)
    : package_(std::move(package)), config_(read_hunyuan15_config(package_)), backend_(options.backend) {
  const auto& p = package_;
  for (const char* name : {"tokenizer", "text_encoder", "text_encoder_2", "transformer", "vae_decoder"}) p.component(name);
  if (p.limits.last_image != InputUse::none) bad_manifest(p, "manifest field 'inputs.last_image': this family takes a first frame only");
  if (p.limits.image == InputUse::optional)  // the exporter ships one transformer: with image inputs or without
    bad_manifest(p, "manifest field 'inputs.image' must be \"none\" (text-to-video) or \"required\" (image-to-video)");
  image_ = p.limits.image == InputUse::required;
  if (image_)
    for (const char* name : {"vae_encoder", "image_encoder"}) p.component(name);
  tokenizer_ = BpeTokenizer::load(p.component("tokenizer").file);
  text_cache_ = make_text_cache(options);
}

std::shared_ptr<Family> make_hunyuan15_family(ModelPackage package, const FamilyOptions& options) {
  return std::make_shared<Hunyuan15Family>(std::move(package), options);
}

JobSpec Hunyuan15Family::validate(const json::value& spec) const {
  auto limits = package_.limits;
  limits.schedulers = {package_.scheduler_type};  // the pipeline's sigmas are this scheduler's
  auto s = parse_job_spec(spec, package_.defaults, limits);
  if (!s.loras.empty()) throw_error(ErrorKind::invalid_argument, "loras: not supported by the " + package_.family + " family");
  return s;
}

std::shared_ptr<FamilyJob> Hunyuan15Family::create_job(JobSpec spec) const {
  auto j = std::make_shared<Hunyuan15Job>();
  j->spec = std::move(spec);
  return j;
}

std::shared_ptr<const Module> Hunyuan15Family::module(const std::string& component, const std::string& device) const {
  return ModuleCache::instance().get_component(package_, component, device, backend_);
}

std::string Hunyuan15Family::templated(const std::string& prompt) const {
  std::string out = config_.template_text;
  const auto put = [&out](const std::string& key, const std::string& value) {
    if (const auto at = out.find(key); at != std::string::npos) out.replace(at, key.size(), value);
  };
  put("{system}", config_.system_message);  // first: a system message never holds "{prompt}" for us to expand
  put("{prompt}", prompt.empty() ? std::string(" ") : prompt);  // format_text_input: an empty prompt is " "
  return out;
}

at::Tensor Hunyuan15Family::text_masks(const std::vector<std::string>& texts) const {
  std::vector<std::string> full;
  for (const auto& t : texts) full.push_back(templated(t));
  const int length = config_.crop_start + config_.max_length;
  const auto batch = tokenizer_->encode_batch(full, length, package_.pad_id);
  return at::tensor(batch.mask, at::kLong).reshape({batch.batch, length}).narrow(1, config_.crop_start, config_.max_length).to(at::kFloat);
}

at::Tensor Hunyuan15Family::encode_texts(const std::string& device, const std::vector<std::string>& texts) const {
  std::vector<std::string> full;
  for (const auto& t : texts) full.push_back(templated(t));
  const int length = config_.crop_start + config_.max_length;
  const auto batch = tokenizer_->encode_batch(full, length, package_.pad_id);
  auto ids = at::tensor(batch.ids, at::kLong).reshape({batch.batch, length});
  auto mask = at::tensor(batch.mask, at::kLong).reshape({batch.batch, length});
  return module("text_encoder", device)->forward({ids, mask}).to(at::kCPU).to(at::kFloat);  // cropped by the module
}

at::Tensor Hunyuan15Family::encode_glyphs(const std::string& device, const std::vector<std::string>& glyphs) const {
  const std::int64_t n = static_cast<std::int64_t>(glyphs.size()), len = config_.glyph_length;
  auto ids = at::empty({n, len}, at::kLong);
  auto mask = at::empty({n, len}, at::kFloat);
  for (std::int64_t i = 0; i < n; ++i)
    byt5_ids(glyphs[static_cast<std::size_t>(i)], config_.glyph_length, config_.glyph_offset, config_.glyph_eos,
             config_.glyph_pad, ids[i].data_ptr<std::int64_t>(), mask[i].data_ptr<float>());
  return module("text_encoder_2", device)->forward({ids, mask}).to(at::kCPU).to(at::kFloat);
}

void Hunyuan15Family::prepare(const std::string& device, const std::vector<FamilyJob*>& jobs) {
  // Each distinct prompt (Qwen) and glyph text (ByT5) once: the cache, then the group, then one call each.
  TextLookup texts(text_cache_.get(), package_.id(), device), glyphs(text_cache_.get(), package_.id(), device);
  auto rows_of = [](const FamilyJob& j) {
    std::vector<std::string> rows;
    if (hunyuan15_uses_guidance(j.spec.guidance)) rows.push_back(j.spec.negative_prompt);
    rows.push_back(j.spec.prompt);
    return rows;
  };
  for (auto* j : jobs) {
    bool hit = true;
    for (const auto& t : rows_of(*j)) {
      hit = texts.want(t) && hit;  // asked for even after a miss
      if (const auto g = hunyuan15_glyph_text(t)) hit = glyphs.want(glyph_key(*g)) && hit;
    }
    j->text_cache_hit = hit;
  }
  auto split = [](const at::Tensor& all, std::size_t n) {
    std::vector<at::Tensor> out;
    for (std::size_t i = 0; i < n; ++i) out.push_back(all.narrow(0, static_cast<std::int64_t>(i), 1).clone());  // own storage
    return out;
  };
  texts.encode_misses([&](const std::vector<std::string>& misses) { return split(encode_texts(device, misses), misses.size()); });
  glyphs.encode_misses([&](const std::vector<std::string>& misses) {
    std::vector<std::string> raw;
    for (const auto& m : misses) raw.push_back(m.substr(glyph_key("").size()));
    return split(encode_glyphs(device, raw), misses.size());
  });
  const auto& p = package_;
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  for (auto* job : jobs) {
    auto& j = hy(*job);
    const auto rows = rows_of(j);
    std::vector<at::Tensor> text, glyph, glyph_mask;
    for (const auto& t : rows) {
      text.push_back(texts.get(t));
      const auto g = hunyuan15_glyph_text(t);
      glyph.push_back(g ? glyphs.get(glyph_key(*g)) : at::zeros({1, config_.glyph_length, config_.glyph_dim}, opts));
      auto m = at::zeros({1, config_.glyph_length}, opts);
      if (g) {
        std::vector<std::int64_t> unused(static_cast<std::size_t>(config_.glyph_length));
        byt5_ids(*g, config_.glyph_length, config_.glyph_offset, config_.glyph_eos, config_.glyph_pad, unused.data(), m.data_ptr<float>());
      }
      glyph_mask.push_back(m);
    }
    j.text = at::cat(text, 0);
    j.text_mask = text_masks(rows);
    j.glyph = at::cat(glyph, 0);
    j.glyph_mask = at::cat(glyph_mask, 0);
    // The job's own seeded CPU generator: the same noise on every device and in any batch.
    const auto [f, h, w] = latent_grid(j.spec, p);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(j.spec.seed);
    j.state.step = 0;
    j.state.latents = at::randn({1, p.latent_channels, f, h, w}, gen, opts);
    if (image_) prepare_image(device, j);
  }
}

void Hunyuan15Family::prepare_image(const std::string& device, Hunyuan15Job& job) const {
  const auto fitted = hunyuan15_fit_image(job_first_frame(job), job.spec.width, job.spec.height);
  auto in = hunyuan15_image_inputs(*module("vae_encoder", device), *module("image_encoder", device), fitted, config_.scaling_factor);
  job.image_condition = std::move(in.condition);
  job.image_tokens = std::move(in.tokens);
}

std::unique_ptr<Scheduler> Hunyuan15Family::make_scheduler(const FamilyJob& job) const {
  auto params = scheduler_params_of(package_.scheduler_config);
  params["sigma_schedule"] = std::string("one_to_zero");  // linspace(1, 0, n + 1)[:-1]
  if (job.spec.shift > 0) params["shift"] = job.spec.shift;
  auto s = vgen::make_scheduler(package_.scheduler_type, params);
  s->set_timesteps(job.spec.steps);
  return s;
}

// Shape, steps, shift and whether guidance runs: prompts, seeds and guidance scales may differ
// within a call (each job's rows carry their own texts and masks).
std::string Hunyuan15Family::denoise_key(const FamilyJob& job, const Scheduler& s) const {
  std::string k = key_prefix() + "|" + std::string(s.name()) + "|" + std::to_string(job.spec.steps) + "|" +
                  (hunyuan15_uses_guidance(job.spec.guidance) ? "cfg" : "nocfg") + "|shift:" + std::to_string(job.spec.shift);
  if (!job.spec.precision.empty()) k += "|precision:" + job.spec.precision;  // one transformer variant per call
  for (auto d : job.state.latents.sizes()) k += "|" + std::to_string(d);
  return k;
}

at::Tensor Hunyuan15Family::transformer_call(const std::string& device, const std::string& precision, const at::Tensor& latents,
                                             const at::Tensor& timestep, const at::Tensor& text, const at::Tensor& mask,
                                             const at::Tensor& glyph, const at::Tensor& glyph_mask,
                                             const std::vector<at::Tensor>& image) const {
  const auto& name = package_.component_for("transformer", precision);
  auto transformer = with_cuda_graphs(module(name, device), package_, name);  // model_backend.cuda_graphs
  const auto dtype = transformer->dtype();
  std::vector<at::Tensor> in{latents.to(dtype), timestep.to(dtype), text.to(dtype), mask.to(dtype), glyph.to(dtype), glyph_mask.to(dtype)};
  for (const auto& t : image) in.push_back(t.to(dtype));
  return transformer->forward(in);
}

at::Tensor Hunyuan15Family::predict(const PredictCall& call) {
  const auto& live = call.jobs;
  const bool cfg = hunyuan15_uses_guidance(live.front()->spec.guidance);
  std::vector<at::Tensor> text, mask, glyph, glyph_mask, condition, tokens;
  for (auto* job : live) {
    const auto& j = hy(*job);
    text.push_back(j.text), mask.push_back(j.text_mask), glyph.push_back(j.glyph), glyph_mask.push_back(j.glyph_mask);
    if (image_) condition.push_back(j.image_condition), tokens.push_back(j.image_tokens);
  }
  const auto rows = [cfg](const at::Tensor& x) { return cfg ? x.repeat_interleave(2, 0) : x; };  // job j's rows 2j (uncond), 2j+1 (cond)
  auto t = rows(row_timesteps(call)).contiguous();
  std::vector<at::Tensor> image;
  if (image_) image = {rows(at::cat(condition, 0)), rows(at::cat(tokens, 0))};
  auto pred = transformer_call(call.device, live.front()->spec.precision, rows(call.x), t, at::cat(text, 0), at::cat(mask, 0),
                               at::cat(glyph, 0), at::cat(glyph_mask, 0), image)
                  .to(at::kCPU)
                  .to(at::kFloat);
  return cfg ? guide_rows(pred, live) : pred;  // ClassifierFreeGuidance: uncond + g * (cond - uncond)
}

at::Tensor Hunyuan15Family::decode_latents(const std::string& device, const at::Tensor& latents) const {
  auto vae = module("vae_decoder", device);
  return vae->forward({(latents / config_.scaling_factor).to(vae->dtype())}).to(at::kCPU).to(at::kFloat);  // [N, 3, F, H, W]
}

void Hunyuan15Family::decode(const std::string& device, const std::vector<FamilyJob*>& jobs) {
  std::vector<at::Tensor> zs;
  for (auto* j : jobs) zs.push_back(j->state.latents);
  set_frames(decode_latents(device, zs.size() == 1 ? zs[0] : at::cat(zs, 0)), jobs);
}

// Every module twice at the smallest size (the profiling executor optimises on the second call).
void Hunyuan15Family::warm_up(const std::string& device) {
  const auto& p = package_;
  const auto& lim = p.limits;
  const int side = std::max(lim.size_multiple, (lim.min_size + lim.size_multiple - 1) / lim.size_multiple * lim.size_multiple);
  const std::int64_t hw = side / p.spatial_scale;
  for (int call = 0; call < 2; ++call) {
    auto text = encode_texts(device, {"", "warm up"});
    auto glyph = encode_glyphs(device, {"Text \"warm up\". ", "x"});
    auto z = at::zeros({2, p.latent_channels, 1, hw, hw}, at::kFloat);
    std::vector<at::Tensor> image;
    if (image_) {  // both encoders on a grey picture; their outputs feed the transformer's image inputs
      RgbImage grey{side, side, std::vector<std::uint8_t>(static_cast<std::size_t>(side) * side * 3, 128)};
      auto in = hunyuan15_image_inputs(*module("vae_encoder", device), *module("image_encoder", device), grey, config_.scaling_factor);
      image = {in.condition.repeat({2, 1, 1, 1, 1}), in.tokens.repeat({2, 1, 1})};
    }
    transformer_call(device, p.defaults.precision, z, at::full({2}, 500.0, at::kFloat), text, at::ones({2, config_.max_length}, at::kFloat),
                     glyph, at::ones({2, config_.glyph_length}, at::kFloat), image);
    decode_latents(device, z.narrow(0, 0, 1));
  }
}

CacheStats Hunyuan15Family::text_cache_stats() const { return text_cache_ ? text_cache_->stats() : CacheStats{}; }

// The family's manifest name, registered by the build's register_builtin_families() (cmake/family.cmake).
void register_hunyuan15_family() { families().add("hunyuan-video-1.5", &make_hunyuan15_family); }

}  // namespace vgen
