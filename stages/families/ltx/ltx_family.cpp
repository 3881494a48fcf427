#include "stages/families/ltx/ltx_family.hpp"

#include "runtime/content_key.hpp"
#include "runtime/errors.hpp"
#include "stages/families/family_kit.hpp"
#include "stages/media/image_input.hpp"
#include "stages/text/text_lookup.hpp"
#include "stages/model/cuda_graph_calls.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <boost/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace vgen {

namespace json = boost::json;

namespace {

LtxJob& ltx(FamilyJob& job) { return static_cast<LtxJob&>(job); }
const LtxJob& ltx(const FamilyJob& job) { return static_cast<const LtxJob&>(job); }

[[noreturn]] void bad_manifest(const ModelPackage& p, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, "model package '" + p.dir.string() + "': " + what);
}

const json::object& section(const ModelPackage& p, const json::object& manifest, const char* name) {
  const auto* v = manifest.if_contains(name);
  if (!v || !v->is_object()) bad_manifest(p, std::string("manifest lacks the object '") + name + "'");
  return v->get_object();
}

double number_or(const ModelPackage& p, const json::object& o, const char* where, const char* key, double fallback) {
  const auto* v = o.if_contains(key);
  if (!v) return fallback;
  if (!v->is_number() || !std::isfinite(v->to_number<double>()))
    bad_manifest(p, std::string("manifest field '") + where + key + "' must be a finite number");
  return v->to_number<double>();
}

// The latent grid a job's spec asks for: [F', H', W'].
std::array<std::int64_t, 3> latent_grid(const JobSpec& spec, const ModelPackage& p) {
  return {(spec.frames - 1) / p.temporal_scale + 1, spec.height / p.spatial_scale, spec.width / p.spatial_scale};
}

}  // namespace

LtxConfig read_ltx_config(const ModelPackage& p) { return read_ltx_config(p, p.manifest); }

LtxConfig read_ltx_config(const ModelPackage& p, const json::object& manifest) {
  LtxConfig c;
  const auto& t = section(p, manifest, "transformer");
  c.patch_size = static_cast<int>(number_or(p, t, "transformer.", "patch_size", 1));
  c.patch_size_t = static_cast<int>(number_or(p, t, "transformer.", "patch_size_t", 1));
  if (c.patch_size != 1 || c.patch_size_t != 1)
    bad_manifest(p, "transformer.patch_size and patch_size_t must be 1 (vgen packs LTX latents with patch size 1)");
  const auto& v = section(p, manifest, "vae");
  c.scaling_factor = number_or(p, v, "vae.", "scaling_factor", 1.0);
  if (!(c.scaling_factor > 0)) bad_manifest(p, "vae.scaling_factor must be positive");
  const auto* cond = v.if_contains("timestep_conditioning");
  if (cond && !cond->is_bool()) bad_manifest(p, "manifest field 'vae.timestep_conditioning' must be true or false");
  c.timestep_conditioning = cond && cond->get_bool();
  c.decode_timestep = number_or(p, v, "vae.", "decode_timestep", 0.0);
  c.decode_noise_scale = number_or(p, v, "vae.", "decode_noise_scale", c.decode_timestep);
  return c;
}

at::Tensor ltx_video_coords(std::int64_t f, std::int64_t h, std::int64_t w, double fps, const ModelPackage& p,
                            const LtxConfig& c) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  auto grid = at::meshgrid({at::arange(f, opts), at::arange(h, opts), at::arange(w, opts)}, "ij");
  // (temporal_scale / frame_rate, spatial, spatial) times the patch sizes, in this order.
  auto rows = at::stack({grid[0] * (static_cast<double>(p.temporal_scale) / fps) * c.patch_size_t,
                         grid[1] * p.spatial_scale * c.patch_size, grid[2] * p.spatial_scale * c.patch_size},
                        0);
  return rows.flatten(1).unsqueeze(0);
}

at::Tensor ltx_pack(const at::Tensor& latents) {
  const auto n = latents.size(0), ch = latents.size(1);
  return latents.permute({0, 2, 3, 4, 1}).reshape({n, -1, ch});
}

at::Tensor ltx_unpack(const at::Tensor& tokens, std::int64_t f, std::int64_t h, std::int64_t w) {
  return tokens.reshape({tokens.size(0), f, h, w, tokens.size(2)}).permute({0, 4, 1, 2, 3}).contiguous();
}

LtxFamily::LtxFamily(ModelPackage package, const FamilyOptions& options)
    : package_(std::move(package)), config_(read_ltx_config(package_)), backend_(options.backend) {
  const auto& p = package_;
  for (const char* name : {"tokenizer", "text_encoder", "transformer", "vae_decoder"}) p.component(name);  // named if missing
  if (p.limits.image != InputUse::none) {  // image-to-video: the encoder and per-token timesteps
    p.component("vae_encoder");
    const auto* t = p.manifest.if_contains("transformer");
    const auto* mode = t && t->is_object() ? t->get_object().if_contains("timestep") : nullptr;
    if (!mode || !mode->is_string() || mode->get_string() != "per_token")
      bad_manifest(p, "manifest field 'transformer.timestep' must be \"per_token\" for image inputs");
  }
  tokenizer_ = Tokenizer::load(p.component("tokenizer").file,
                               {.max_length = p.max_length, .pad_id = p.pad_id, .eos_id = p.eos_id, .add_eos = p.add_eos});
  text_cache_ = make_text_cache(options);
}

std::shared_ptr<Family> make_ltx_family(ModelPackage package, const FamilyOptions& options) {
  return std::make_shared<LtxFamily>(std::move(package), options);
}

JobSpec LtxFamily::validate(const json::value& spec) const {
  auto limits = package_.limits;
  limits.schedulers = {package_.scheduler_type};  // the pipeline's sigmas and shift are this scheduler's
  auto s = parse_job_spec(spec, package_.defaults, limits);
  if (s.shift > 0)  // LTXPipeline's shift follows the latent sequence length (mu)
    throw_error(ErrorKind::invalid_argument, "shift: not settable for " + package_.family + " (its shift follows the latent size)");
  if (!s.loras.empty()) throw_error(ErrorKind::invalid_argument, "loras: not supported by the " + package_.family + " family");
  return s;
}

std::shared_ptr<FamilyJob> LtxFamily::create_job(JobSpec spec) const {
  auto j = std::make_shared<LtxJob>();
  j->spec = std::move(spec);
  return j;
}

std::shared_ptr<const Module> LtxFamily::module(const std::string& component, const std::string& device) const {
  return ModuleCache::instance().get_component(package_, component, device, backend_);
}

// [texts, L, D] float32 on the CPU: T5 over all max_length positions, unmasked (LTXPipeline).
at::Tensor LtxFamily::encode_texts(const std::string& device, const std::vector<std::string>& texts) const {
  auto batch = tokenizer_->encode_batch(texts);
  auto ids = at::tensor(batch.ids, at::kLong).reshape({batch.batch, batch.length});
  return module("text_encoder", device)->forward({ids}).to(at::kCPU).to(at::kFloat);
}

void LtxFamily::prepare(const std::string& device, const std::vector<FamilyJob*>& jobs) {
  // Each distinct text once (stages/text/text_lookup).
  TextLookup lookup(text_cache_.get(), package_.id(), device);
  for (auto* j : jobs) {
    const bool cfg = j->spec.guidance > 1.0;
    const bool hit_cond = lookup.want(j->spec.prompt);
    const bool hit_uncond = !cfg || lookup.want(j->spec.negative_prompt);  // asked for even when the prompt missed
    j->text_cache_hit = hit_cond && hit_uncond;
  }
  lookup.encode_misses([&](const std::vector<std::string>& misses) {
    auto encoded = encode_texts(device, misses);
    std::vector<at::Tensor> out;
    for (std::size_t i = 0; i < misses.size(); ++i)
      out.push_back(encoded.narrow(0, static_cast<std::int64_t>(i), 1).clone());  // its own storage for the cache
    return out;
  });
  const auto& p = package_;
  for (auto* job : jobs) {
    auto& j = ltx(*job);
    const bool cfg = j.spec.guidance > 1.0;
    std::vector<std::string> texts;
    if (cfg) texts.push_back(j.spec.negative_prompt);
    texts.push_back(j.spec.prompt);
    std::vector<at::Tensor> rows;
    for (const auto& t : texts) rows.push_back(lookup.get(t));
    j.embeds = at::cat(rows, 0);
    const auto tok = tokenizer_->encode_batch(texts, cfg ? "negative_prompt" : "prompt");
    j.text_mask = at::tensor(tok.mask, at::kLong).reshape({tok.batch, tok.length}).to(at::kFloat);
    // The job's own seeded CPU generator: the initial noise, then (conditioned VAE) the decode
    // noise, in the order LTXPipeline draws them: the same on every device and in any batch.
    const auto [f, h, w] = latent_grid(j.spec, p);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(j.spec.seed);
    const auto opts = at::TensorOptions().dtype(at::kFloat);
    j.state.step = 0;
    if (j.has_image()) j.condition = first_frame_latents(device, j, gen);  // draws before the noise, as diffusers
    j.state.latents = at::randn({1, p.latent_channels, f, h, w}, gen, opts);
    if (j.condition.defined()) j.state.latents.narrow(2, 0, 1).copy_(j.condition);  // init * mask + noise * (1 - mask)
    j.decode_noise = config_.timestep_conditioning && config_.decode_noise_scale != 0.0
                         ? at::randn({1, p.latent_channels, f, h, w}, gen, opts)
                         : at::Tensor();
  }
}

// The image's posterior sample (mean + std * noise, the noise from the job's generator),
// normalised: (x - latents_mean) * scaling_factor / latents_std, LTXPipeline's order.
at::Tensor LtxFamily::first_frame_latents(const std::string& device, const LtxJob& j, at::Generator& gen) const {
  at::Tensor picture = j.image;
  if (!picture.defined()) {  // the spec's file, resized to the video as diffusers' video processor does
    auto img = job_first_frame(j);  // an extend job's is fitted already
    if (img.width != j.spec.width || img.height != j.spec.height) img = resize_rgb(img, j.spec.width, j.spec.height);
    picture = at::from_blob(img.rgb.data(), {img.height, img.width, 3}, at::kByte).permute({2, 0, 1}).to(at::kFloat).div(255.0);
  }
  if (picture.dim() != 3 || picture.size(0) != 3 || picture.size(1) != j.spec.height || picture.size(2) != j.spec.width)
    throw_error(ErrorKind::invalid_argument, "image: must be fitted to the job's " + std::to_string(j.spec.width) + "x" +
                                                 std::to_string(j.spec.height) + " before conditioning");
  const auto& p = package_;
  const std::int64_t c = p.latent_channels;
  auto encoder = module("vae_encoder", device);
  auto video = (picture.to(at::kFloat) * 2 - 1).unsqueeze(0).unsqueeze(2);  // [1, 3, 1, H, W] in [-1, 1]
  auto moments = encoder->forward({video.to(encoder->dtype())}).to(at::kCPU).to(at::kFloat);
  auto mean = moments.narrow(1, 0, c), std = moments.narrow(1, c, c);
  auto sample = mean + std * at::randn(mean.sizes(), gen, at::TensorOptions().dtype(at::kFloat));
  auto lat_mean = at::tensor(p.latents_mean, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto lat_std = at::tensor(p.latents_std, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  return (sample - lat_mean) * config_.scaling_factor / lat_std;
}

std::unique_ptr<Scheduler> LtxFamily::make_scheduler(const FamilyJob& job) const {
  auto params = scheduler_params_of(package_.scheduler_config);
  const auto [f, h, w] = latent_grid(job.spec, package_);
  params["sigma_schedule"] = std::string("one_to_one_over_n");
  params["image_seq_len"] = static_cast<double>(f * h * w);  // LTXPipeline's video_sequence_length
  auto s = vgen::make_scheduler(package_.scheduler_type, params);
  s->set_timesteps(job.spec.steps);
  return s;
}

// Shape, steps and whether guidance runs: prompts, guidance scales and frame rates may differ
// within a call (each job's rows carry their own text, mask and rope coordinates).
std::string LtxFamily::denoise_key(const FamilyJob& job, const Scheduler& s) const {
  std::string k = key_prefix() + "|" + std::string(s.name()) + "|" + std::to_string(job.spec.steps) + "|" +
                  (job.spec.guidance > 1.0 ? "cfg" : "nocfg");
  if (!job.spec.precision.empty()) k += "|precision:" + job.spec.precision;  // one transformer variant per call
  for (auto d : job.state.latents.sizes()) k += "|" + std::to_string(d);
  return ltx(job).condition.defined() ? k + "|image" : k;
}

at::Tensor LtxFamily::transformer_call(const std::string& device, const std::string& precision, const at::Tensor& latents,
                                       const at::Tensor& timestep, const at::Tensor& embeds, const at::Tensor& mask,
                                       const at::Tensor& coords) const {
  const auto& name = package_.component_for("transformer", precision);
  auto transformer = with_cuda_graphs(module(name, device), package_, name);  // model_backend.cuda_graphs
  const auto dtype = transformer->dtype();
  return transformer->forward({latents.to(dtype), timestep, embeds.to(dtype), mask, coords});
}

at::Tensor LtxFamily::predict(const PredictCall& call) {
  const auto& live = call.jobs;
  const bool cfg = live.front()->spec.guidance > 1.0;
  const std::int64_t per_job = cfg ? 2 : 1;
  const auto f = call.x.size(2), h = call.x.size(3), w = call.x.size(4);
  std::vector<at::Tensor> embeds, masks, coords;
  for (auto* job : live) {
    const auto& j = ltx(*job);
    embeds.push_back(j.embeds);
    masks.push_back(j.text_mask);
    coords.push_back(ltx_video_coords(f, h, w, j.spec.fps, package_, config_).expand({per_job, 3, f * h * w}));
  }
  auto tokens = ltx_pack(call.x);
  auto input = cfg ? tokens.repeat_interleave(2, 0) : tokens;  // job j's rows 2j (uncond), 2j+1 (cond)
  auto t = row_timesteps(call);  // one per job
  const bool image = std::any_of(live.begin(), live.end(), [](auto* j) { return ltx(*j).condition.defined(); });
  if (image) {  // one per token, 0 on the given first frame's (t * (1 - conditioning_mask))
    t = t.reshape({-1, 1}).repeat({1, f * h * w});
    for (std::size_t j = 0; j < live.size(); ++j)
      if (ltx(*live[j]).condition.defined()) t[static_cast<std::int64_t>(j)].narrow(0, 0, h * w).zero_();
  }
  t = (cfg ? t.repeat_interleave(2, 0) : t).contiguous();
  auto pred = transformer_call(call.device, live.front()->spec.precision, input, t, at::cat(embeds, 0), at::cat(masks, 0), at::cat(coords, 0).contiguous())
                  .to(at::kCPU)
                  .to(at::kFloat);  // LTXPipeline: noise_pred.float()
  if (cfg) pred = guide_rows(pred, live);
  auto out = ltx_unpack(pred, f, h, w);
  for (std::size_t j = 0; j < live.size(); ++j)  // the given frame is not stepped: x + dt * 0 = x exactly
    if (ltx(*live[j]).condition.defined()) out[static_cast<std::int64_t>(j)].narrow(1, 0, 1).zero_();
  return out;
}

// z: normalised latents [N, C, F', H', W'] float32; noise: the rows' decode noise or undefined.
at::Tensor LtxFamily::decode_latents(const std::string& device, const at::Tensor& z, const at::Tensor& noise) const {
  const auto& p = package_;
  const std::int64_t c = p.latent_channels, n = z.size(0);
  auto mean = at::tensor(p.latents_mean, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto std = at::tensor(p.latents_std, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto x = z * std / config_.scaling_factor + mean;  // LTXPipeline._denormalize_latents
  auto t = at::zeros({n}, at::kFloat);
  if (config_.timestep_conditioning) {
    if (noise.defined()) {
      auto scale = at::full({n, 1, 1, 1, 1}, config_.decode_noise_scale, at::kFloat);
      x = at::rsub(scale, 1) * x + scale * noise;
    }
    t = at::full({n}, config_.decode_timestep, at::kFloat);
  }
  auto vae = module("vae_decoder", device);
  return vae->forward({x.to(vae->dtype()), t}).to(at::kCPU).to(at::kFloat);  // [N, 3, F, H, W]
}

void LtxFamily::decode(const std::string& device, const std::vector<FamilyJob*>& jobs) {
  std::vector<at::Tensor> zs, noises;
  for (auto* j : jobs) {
    zs.push_back(j->state.latents);
    if (ltx(*j).decode_noise.defined()) noises.push_back(ltx(*j).decode_noise);
  }
  auto cat = [](const std::vector<at::Tensor>& xs) { return xs.size() == 1 ? xs[0] : at::cat(xs, 0); };
  if (!noises.empty() && noises.size() != zs.size())
    throw_error(ErrorKind::internal, "ltx decode: a group mixes jobs with and without decode noise");
  set_frames(decode_latents(device, cat(zs), noises.empty() ? at::Tensor() : cat(noises)), jobs);
}

// Every module twice at the smallest size (the profiling executor optimises on the second call).
void LtxFamily::warm_up(const std::string& device) {
  const auto& p = package_;
  const auto& lim = p.limits;
  const int side = std::max(lim.size_multiple, (lim.min_size + lim.size_multiple - 1) / lim.size_multiple * lim.size_multiple);
  const std::int64_t f = 1, hw = side / p.spatial_scale;
  for (int call = 0; call < 2; ++call) {
    auto embeds = encode_texts(device, {"", "warm up"});
    auto z = at::zeros({2, p.latent_channels, f, hw, hw}, at::kFloat);
    auto coords = ltx_video_coords(f, hw, hw, p.defaults.fps, p, config_).expand({2, 3, f * hw * hw}).contiguous();
    transformer_call(device, p.defaults.precision, ltx_pack(z), at::full({2}, 500.0, at::kFloat), embeds, at::ones({2, p.max_length}, at::kFloat),
                     coords);
    decode_latents(device, z.narrow(0, 0, 1), at::Tensor());
    if (p.limits.image != InputUse::none) module("vae_encoder", device)->forward({at::zeros({1, 3, 1, side, side}, at::kFloat)});
  }
}

CacheStats LtxFamily::text_cache_stats() const { return text_cache_ ? text_cache_->stats() : CacheStats{}; }

// The family's manifest name(s), registered by the build's register_builtin_families()
// (cmake/family.cmake).
void register_ltx_family() {
  families().add("ltx-video", &make_ltx_family);
}

}  // namespace vgen
