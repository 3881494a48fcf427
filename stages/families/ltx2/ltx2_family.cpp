#include "stages/families/ltx2/ltx2_family.hpp"

#include "runtime/errors.hpp"
#include "stages/families/family_kit.hpp"
#include "stages/families/ltx/ltx_family.hpp"
#include "stages/families/ltx2/ltx2_audio.hpp"
#include "stages/media/audio_track.hpp"
#include "stages/media/image_input.hpp"
#include "stages/text/text_lookup.hpp"
#include "stages/model/cuda_graph_calls.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <boost/json.hpp>

#include <chrono>
#include <cmath>

namespace vgen {

namespace json = boost::json;

namespace {

Ltx2Job& ltx2(FamilyJob& job) { return static_cast<Ltx2Job&>(job); }

[[noreturn]] void bad_manifest(const ModelPackage& p, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, "model package '" + p.dir.string() + "': " + what);
}

const json::object& section(const ModelPackage& p, const json::object& o, const char* name, const char* where = "") {
  const auto* v = o.if_contains(name);
  if (!v || !v->is_object()) bad_manifest(p, std::string("manifest lacks the object '") + where + name + "'");
  return v->get_object();
}

double number(const ModelPackage& p, const json::object& o, const char* where, const char* key) {
  const auto* v = o.if_contains(key);
  if (!v || !v->is_number() || !std::isfinite(v->to_number<double>()))
    bad_manifest(p, std::string("manifest field '") + where + key + "' must be a finite number");
  return v->to_number<double>();
}

std::int64_t positive(const ModelPackage& p, const json::object& o, const char* where, const char* key) {
  const double v = number(p, o, where, key);
  if (v < 1 || v > (1 << 20) || v != std::floor(v)) bad_manifest(p, std::string("manifest field '") + where + key + "' must be a positive integer");
  return static_cast<std::int64_t>(v);
}

// The velocity LTX2Pipeline steps with, from the model's velocity: through x0 and back
// (convert_velocity_to_x0 / convert_x0_to_velocity) with the guidance delta in x0 space, the
// same float32 operations in the same order. `sigma`: the step's 0-dim float32 sigma.
at::Tensor guided_velocity(const at::Tensor& x, const at::Tensor& cond, const at::Tensor* uncond, double guidance,
                           const at::Tensor& sigma) {
  auto x0 = x - cond * sigma;
  if (uncond) {
    const auto x0_uncond = x - *uncond * sigma;
    x0 = x0 + (guidance - 1) * (x0 - x0_uncond);
  }
  return (x - x0) / sigma;
}

}  // namespace

Ltx2Config read_ltx2_config(const ModelPackage& p) {
  const auto& m = p.manifest;
  Ltx2Config c;
  const auto& tok = section(p, m, "tokenizer");
  c.bos_id = static_cast<int>(number(p, tok, "tokenizer.", "bos_id"));
  const auto* padding = tok.if_contains("padding");
  if (!padding || !padding->is_string() || padding->get_string() != "left")
    bad_manifest(p, "manifest field 'tokenizer.padding' must be \"left\" (Gemma's, as LTX2Pipeline pads)");
  const auto& te = section(p, m, "text_encoder");
  c.text_dim = positive(p, te, "text_encoder.", "video_dim");
  if (positive(p, te, "text_encoder.", "audio_dim") != c.text_dim)
    bad_manifest(p, "text_encoder.audio_dim must equal text_encoder.video_dim (the transformer's caption_channels)");
  const auto& t = section(p, m, "transformer");
  if (number(p, t, "transformer.", "patch_size") != 1 || number(p, t, "transformer.", "patch_size_t") != 1)
    bad_manifest(p, "transformer.patch_size and patch_size_t must be 1 (vgen packs LTX-2 latents with patch size 1)");
  const auto& r = section(p, t, "rope", "transformer.");
  const auto* sf = r.if_contains("scale_factors");
  if (!sf || !sf->is_array() || sf->get_array().size() != 3) bad_manifest(p, "transformer.rope.scale_factors must hold 3 numbers");
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& v = sf->get_array()[i];
    if (!v.is_number()) bad_manifest(p, "transformer.rope.scale_factors must hold 3 numbers");
    c.scale_factors[i] = static_cast<std::int64_t>(v.to_number<double>());
  }
  c.causal_offset = static_cast<std::int64_t>(number(p, r, "transformer.rope.", "causal_offset"));
  c.audio_scale = positive(p, r, "transformer.rope.", "audio_scale");
  c.audio_causal_offset = static_cast<std::int64_t>(number(p, r, "transformer.rope.", "audio_causal_offset"));
  c.rope_hop = positive(p, r, "transformer.rope.", "hop_length");
  c.rope_rate = positive(p, r, "transformer.rope.", "sampling_rate");
  const auto& a = section(p, m, "audio");
  c.audio_channels = positive(p, a, "audio.", "latent_channels");
  c.audio_mel_bins = positive(p, a, "audio.", "latent_mel_bins");
  c.sample_rate = positive(p, a, "audio.", "vae_sample_rate");
  c.hop_length = positive(p, a, "audio.", "mel_hop_length");
  c.audio_ratio = positive(p, a, "audio.", "temporal_compression");
  if (c.audio_channels * c.audio_mel_bins != positive(p, t, "transformer.", "audio_in_channels"))
    bad_manifest(p, "audio.latent_channels x audio.latent_mel_bins must equal transformer.audio_in_channels");
  const auto& v = section(p, m, "vae");
  c.scaling_factor = number(p, v, "vae.", "scaling_factor");
  if (!(c.scaling_factor > 0)) bad_manifest(p, "vae.scaling_factor must be positive");
  const auto* cond = v.if_contains("timestep_conditioning");
  if (cond && (!cond->is_bool() || cond->get_bool()))
    bad_manifest(p, "vae.timestep_conditioning must be false (vgen's ltx2 family decodes unconditioned)");
  return c;
}

at::Tensor ltx2_video_coords(std::int64_t f, std::int64_t h, std::int64_t w, double fps, const Ltx2Config& c) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  auto grid = at::stack(at::meshgrid({at::arange(f, opts), at::arange(h, opts), at::arange(w, opts)}, "ij"), 0);
  auto bounds = at::stack({grid, grid + at::ones({3, 1, 1, 1}, opts)}, -1).flatten(1, 3).unsqueeze(0);  // [1,3,S,2]
  auto scale = at::tensor(std::vector<std::int64_t>(c.scale_factors.begin(), c.scale_factors.end()), at::kLong);
  auto pixel = bounds * scale.view({1, 3, 1, 1});
  auto frame = pixel.select(1, 0);
  frame.copy_((frame + c.causal_offset - c.scale_factors[0]).clamp_min(0) / fps);
  return pixel;
}

at::Tensor ltx2_audio_coords(std::int64_t frames, const Ltx2Config& c) {
  auto grid = at::arange(frames, at::TensorOptions().dtype(at::kFloat));
  const auto s = c.audio_scale;
  auto start = (grid * s + c.audio_causal_offset - s).clamp_min(0) * c.rope_hop / c.rope_rate;
  auto end = ((grid + 1) * s + c.audio_causal_offset - s).clamp_min(0) * c.rope_hop / c.rope_rate;
  return at::stack({start, end}, -1).unsqueeze(0).unsqueeze(1);
}

std::int64_t ltx2_audio_frames(int frames, double fps, const Ltx2Config& c) {
  const double duration = frames / fps;
  const double per_second = static_cast<double>(c.sample_rate) / static_cast<double>(c.hop_length) / static_cast<double>(c.audio_ratio);
  const double x = duration * per_second;
  double n = std::round(x);  // half away from zero; Python's round() takes halves to even
  if (std::abs(x - std::trunc(x)) == 0.5) n = 2.0 * std::round(x / 2.0);
  return static_cast<std::int64_t>(n);
}

Ltx2Family::Ltx2Family(ModelPackage package, const FamilyOptions& options)
    : package_(std::move(package)), config_(read_ltx2_config(package_)), backend_(options.backend) {
  const auto& p = package_;
  for (const char* name : {"tokenizer", "text_encoder", "transformer", "vae_decoder"}) p.component(name);  // named if missing
  if (p.limits.last_image != InputUse::none) bad_manifest(p, "inputs.last_image: the ltx2 family takes a first frame only");
  if (p.limits.image != InputUse::none) p.component("vae_encoder");  // image-to-video
  if (p.components.count("audio_vae") && p.components.count("vocoder")) audio_ = Ltx2AudioDecoder::load(p, backend_);
  tokenizer_ = Tokenizer::load(p.component("tokenizer").file,
                               {.max_length = p.max_length, .pad_id = p.pad_id, .eos_id = p.eos_id, .add_eos = false});
  text_cache_ = make_text_cache(options);
}

std::shared_ptr<Family> make_ltx2_family(ModelPackage package, const FamilyOptions& options) {
  return std::make_shared<Ltx2Family>(std::move(package), options);
}

JobSpec Ltx2Family::validate(const json::value& spec) const {
  auto limits = package_.limits;
  limits.schedulers = {package_.scheduler_type};  // the pipeline's sigmas and shift are this scheduler's
  auto s = parse_job_spec(spec, package_.defaults, limits);
  if (s.shift > 0)  // LTX2Pipeline's shift follows the video sequence length (mu)
    throw_error(ErrorKind::invalid_argument, "shift: not settable for " + package_.family + " (its shift follows the latent size)");
  if (!s.loras.empty()) throw_error(ErrorKind::invalid_argument, "loras: not supported by the " + package_.family + " family");
  if (ltx2_audio_frames(s.frames, s.fps, config_) < 1)
    throw_error(ErrorKind::invalid_argument, "frames: too few for one audio latent frame at this fps");
  return s;
}

std::shared_ptr<FamilyJob> Ltx2Family::create_job(JobSpec spec) const {
  auto j = std::make_shared<Ltx2Job>();
  j->spec = std::move(spec);
  return j;
}

std::shared_ptr<const Module> Ltx2Family::module(const std::string& component, const std::string& device) const {
  return ModuleCache::instance().get_component(package_, component, device, backend_);
}

std::array<std::int64_t, 3> Ltx2Family::video_grid(const JobSpec& spec) const {
  const auto& p = package_;
  return {(spec.frames - 1) / p.temporal_scale + 1, spec.height / p.spatial_scale, spec.width / p.spatial_scale};
}

std::int64_t Ltx2Family::audio_frames(const JobSpec& spec) const { return ltx2_audio_frames(spec.frames, spec.fps, config_); }

std::pair<at::Tensor, at::Tensor> Ltx2Family::tokenize(const std::vector<std::string>& texts, std::string_view field) const {
  const std::int64_t n = static_cast<std::int64_t>(texts.size()), len = package_.max_length;
  auto ids = at::full({n, len}, static_cast<std::int64_t>(package_.pad_id), at::kLong);
  auto mask = at::zeros({n, len}, at::kLong);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto& text = texts[static_cast<std::size_t>(i)];
    if (!is_valid_utf8(text)) throw_error(ErrorKind::invalid_argument, std::string(field) + ": not valid UTF-8");
    // Python's str.strip() for the whitespace prompts carry (ASCII whitespace).
    const auto first = text.find_first_not_of(" \t\n\r\f\v");
    const auto stripped = first == std::string::npos ? std::string() : text.substr(first, text.find_last_not_of(" \t\n\r\f\v") - first + 1);
    std::vector<std::int64_t> row{config_.bos_id};
    for (int id : tokenizer_->encode_ids(stripped)) row.push_back(id);
    const auto kept = std::min<std::int64_t>(static_cast<std::int64_t>(row.size()), len);
    for (std::int64_t k = 0; k < kept; ++k) {  // left padding: the tokens end the row
      ids[i][len - kept + k] = row[static_cast<std::size_t>(k)];
      mask[i][len - kept + k] = 1;
    }
  }
  return {ids, mask};
}

// [texts, L, 2D + 1] float32 on the CPU: video context, audio context, the connectors' mask.
at::Tensor Ltx2Family::encode_texts(const std::string& device, const std::vector<std::string>& texts) const {
  auto [ids, mask] = tokenize(texts, "prompt");
  return module("text_encoder", device)->forward({ids, mask}).to(at::kCPU).to(at::kFloat);
}

void Ltx2Family::prepare(const std::string& device, const std::vector<FamilyJob*>& jobs) {
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
  const auto d = config_.text_dim;
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  for (auto* job : jobs) {
    auto& j = ltx2(*job);
    std::vector<at::Tensor> rows;
    if (j.spec.guidance > 1.0) rows.push_back(lookup.get(j.spec.negative_prompt));
    rows.push_back(lookup.get(j.spec.prompt));
    const auto text = at::cat(rows, 0);
    j.video_context = text.narrow(2, 0, d);
    j.audio_context = text.narrow(2, d, d);
    j.text_mask = text.select(2, 2 * d).contiguous();
    // The job's own generator: video noise, then audio noise, as LTX2Pipeline draws them (the
    // image's latents are the posterior's mode: no draw).
    const auto [f, h, w] = video_grid(j.spec);
    if (j.has_image()) j.condition = first_frame_latents(device, j);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(j.spec.seed);
    auto video = ltx_pack(at::randn({1, p.latent_channels, f, h, w}, gen, opts));
    auto audio = at::randn({1, config_.audio_channels, audio_frames(j.spec), config_.audio_mel_bins}, gen, opts)
                     .transpose(1, 2)
                     .flatten(2, 3);  // [1, La, Ca*M]: _pack_audio_latents
    if (j.condition.defined()) video.narrow(1, 0, h * w).copy_(ltx_pack(j.condition));  // init * mask + noise * (1 - mask)
    j.state.step = 0;
    j.state.latents = at::cat({video.flatten(1), audio.flatten(1)}, 1);
    j.sigmas = make_scheduler(j)->sigmas().clone();
  }
}

// The spec's image at the job's size, as diffusers' video processor gives it ([-1, 1]), encoded to
// its posterior's mode and normalised: (x - latents_mean) * 1.0 / latents_std (the I2V pipeline
// normalises without the scaling factor).
at::Tensor Ltx2Family::first_frame_latents(const std::string& device, const FamilyJob& job) const {
  const auto& spec = job.spec;
  auto img = job_first_frame(job);  // an extend job's is fitted already
  if (img.width != spec.width || img.height != spec.height) img = resize_rgb(img, spec.width, spec.height);
  auto picture = at::from_blob(img.rgb.data(), {img.height, img.width, 3}, at::kByte).permute({2, 0, 1}).to(at::kFloat).div(255.0);
  const auto& p = package_;
  const std::int64_t c = p.latent_channels;
  auto encoder = module("vae_encoder", device);
  auto video = (picture * 2 - 1).unsqueeze(0).unsqueeze(2);  // [1, 3, 1, H, W]
  auto mode = encoder->forward({video.to(encoder->dtype())}).to(at::kCPU).to(at::kFloat);
  auto mean = at::tensor(p.latents_mean, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto std = at::tensor(p.latents_std, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  return (mode - mean) * 1.0 / std;
}

std::unique_ptr<Scheduler> Ltx2Family::make_scheduler(const FamilyJob& job) const {
  auto params = scheduler_params_of(package_.scheduler_config);
  const auto [f, h, w] = video_grid(job.spec);
  params["sigma_schedule"] = std::string("one_to_one_over_n");
  params["image_seq_len"] = static_cast<double>(f * h * w);  // LTX2Pipeline's mu from latents.shape[1]
  auto s = vgen::make_scheduler(package_.scheduler_type, params);
  s->set_timesteps(job.spec.steps);
  return s;
}

// Shape (video grid and audio length), steps and whether guidance runs: prompts, guidance
// scales, seeds and frame rates may differ within a call.
std::string Ltx2Family::denoise_key(const FamilyJob& job, const Scheduler& s) const {
  const auto [f, h, w] = video_grid(job.spec);
  std::string k = key_prefix() + "|" + std::string(s.name()) + "|" + std::to_string(job.spec.steps) + "|" +
                  (job.spec.guidance > 1.0 ? "cfg" : "nocfg") + "|" + std::to_string(f) + "x" + std::to_string(h) + "x" +
                  std::to_string(w) + "|audio" + std::to_string(audio_frames(job.spec));
  if (!job.spec.precision.empty()) k += "|precision:" + job.spec.precision;  // one transformer variant per call
  return has_first_frame(job.spec) ? k + "|image" : k;
}

std::string Ltx2Family::decode_key(const FamilyJob& job) const {
  const auto [f, h, w] = video_grid(job.spec);
  return key_prefix() + "|" + std::to_string(f) + "x" + std::to_string(h) + "x" + std::to_string(w) + "|audio" +
         std::to_string(audio_frames(job.spec));
}

at::Tensor Ltx2Family::transformer_call(const std::string& device, const std::string& precision,
                                        const std::vector<at::Tensor>& inputs) const {
  const auto& name = package_.component_for("transformer", precision);
  auto transformer = with_cuda_graphs(module(name, device), package_, name);  // model_backend.cuda_graphs
  const auto dtype = transformer->dtype();
  std::vector<at::Tensor> in;
  for (std::size_t i = 0; i < inputs.size(); ++i)  // tokens and contexts in the model's dtype; t, mask, coords float32
    in.push_back(i < 2 || i == 4 || i == 5 ? inputs[i].to(dtype) : inputs[i]);
  return transformer->forward(in).to(at::kCPU).to(at::kFloat);  // LTX2Pipeline: noise_pred.float()
}

at::Tensor Ltx2Family::predict(const PredictCall& call) {
  const auto& live = call.jobs;
  const auto& first = *live.front();
  const bool cfg = first.spec.guidance > 1.0;
  const std::int64_t per_job = cfg ? 2 : 1;
  const auto [f, h, w] = video_grid(first.spec);
  const std::int64_t s = f * h * w, c = package_.latent_channels, la = audio_frames(first.spec);
  const std::int64_t ca = config_.audio_channels * config_.audio_mel_bins, n = call.x.size(0);
  const auto video = call.x.narrow(1, 0, s * c).reshape({n, s, c});
  const auto audio = call.x.narrow(1, s * c, la * ca).reshape({n, la, ca});
  std::vector<at::Tensor> vctx, actx, masks, vcoords;
  for (auto* job : live) {
    const auto& j = ltx2(*job);
    vctx.push_back(j.video_context);
    actx.push_back(j.audio_context);
    masks.push_back(j.text_mask);
    vcoords.push_back(ltx2_video_coords(f, h, w, j.spec.fps, config_).expand({per_job, 3, s, 2}));
  }
  auto rows = [&](const at::Tensor& t) { return cfg ? t.repeat_interleave(2, 0) : t; };  // job j: rows 2j (uncond), 2j+1
  auto t = row_timesteps(call);  // one per job
  auto vt = t.reshape({-1, 1}).repeat({1, s});  // the video's, one per token: 0 on a given first frame's
  for (std::int64_t r = 0; r < n; ++r)
    if (ltx2(*live[static_cast<std::size_t>(r)]).has_image()) vt[r].narrow(0, 0, h * w).zero_();
  auto acoords = ltx2_audio_coords(la, config_).expand({n * per_job, 1, la, 2}).contiguous();
  auto pred = transformer_call(call.device, first.spec.precision,
                               {rows(video), rows(audio), rows(vt).contiguous(), rows(t).contiguous(), at::cat(vctx, 0),
                                at::cat(actx, 0), at::cat(masks, 0), at::cat(vcoords, 0).contiguous(), acoords});
  std::vector<at::Tensor> out;
  for (std::int64_t r = 0; r < n; ++r) {
    const auto& j = ltx2(*live[static_cast<std::size_t>(r)]);
    const auto sigma = j.sigmas[j.state.step];
    const auto x = call.x.narrow(0, r, 1);
    if (cfg) {
      const auto uncond = pred.narrow(0, 2 * r, 1);
      out.push_back(guided_velocity(x, pred.narrow(0, 2 * r + 1, 1), &uncond, j.spec.guidance, sigma));
    } else {
      out.push_back(guided_velocity(x, pred.narrow(0, r, 1), nullptr, 1.0, sigma));
    }
    if (j.has_image()) out.back().narrow(1, 0, h * w * c).zero_();  // the given frame is not stepped: x + dt * 0 = x
  }
  return out.size() == 1 ? out[0] : at::cat(out, 0);
}

// tokens: packed normalised video latents [N, S, C] -> frames [N, 3, F, H, W] in the VAE's range.
at::Tensor Ltx2Family::decode_video(const std::string& device, const at::Tensor& tokens, std::int64_t f, std::int64_t h,
                                    std::int64_t w) const {
  const auto& p = package_;
  const std::int64_t c = p.latent_channels;
  auto mean = at::tensor(p.latents_mean, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto std = at::tensor(p.latents_std, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto z = ltx_unpack(tokens, f, h, w) * std / config_.scaling_factor + mean;  // _denormalize_latents
  auto vae = module("vae_decoder", device);
  return vae->forward({z.to(vae->dtype())}).to(at::kFloat);  // on the device: set_frames makes the frames there
}

void Ltx2Family::decode(const std::string& device, const std::vector<FamilyJob*>& jobs) {
  const auto [f, h, w] = video_grid(jobs.front()->spec);
  const std::int64_t s = f * h * w, c = package_.latent_channels, la = audio_frames(jobs.front()->spec);
  const std::int64_t ca = config_.audio_channels * config_.audio_mel_bins;
  std::vector<at::Tensor> tokens;
  for (auto* job : jobs) {
    auto& j = ltx2(*job);
    tokens.push_back(j.state.latents.narrow(1, 0, s * c).reshape({1, s, c}));
    j.audio_latents = j.state.latents.narrow(1, s * c, la * ca).reshape({1, la, ca}).clone();
  }
  auto video = decode_video(device, tokens.size() == 1 ? tokens[0] : at::cat(tokens, 0), f, h, w);
  set_frames(video, jobs);  // stages/families/family_kit: VideoProcessor.postprocess_video
  if (!audio_) return;  // a package without the audio decoder: silent video
  std::vector<at::Tensor> latents;
  for (auto* job : jobs) latents.push_back(ltx2(*job).audio_latents);
  const auto start = std::chrono::steady_clock::now();
  auto tracks = audio_->decode(latents.size() == 1 ? latents[0] : at::cat(latents, 0), device);
  const auto end = std::chrono::steady_clock::now();
  for (std::size_t j = 0; j < jobs.size(); ++j) {  // one interval for the call (FamilyJob::audio_start)
    jobs[j]->audio = std::make_shared<const AudioTrack>(std::move(tracks[j]));
    jobs[j]->audio_start = start;
    jobs[j]->audio_end = end;
  }
}

// Every module twice at the smallest size (the profiling executor optimises on the second call).
void Ltx2Family::warm_up(const std::string& device) {
  const auto& p = package_;
  const auto& lim = p.limits;
  const int side = std::max(lim.size_multiple, (lim.min_size + lim.size_multiple - 1) / lim.size_multiple * lim.size_multiple);
  const std::int64_t f = 1, hw = side / p.spatial_scale, s = hw * hw, la = 1, d = config_.text_dim;
  const std::int64_t ca = config_.audio_channels * config_.audio_mel_bins;
  for (int call = 0; call < 2; ++call) {
    auto text = encode_texts(device, {"", "warm up"});
    auto z = at::zeros({2, s, p.latent_channels}, at::kFloat);
    transformer_call(device, p.defaults.precision,
                     {z, at::zeros({2, la, ca}, at::kFloat), at::full({2, s}, 500.0, at::kFloat), at::full({2}, 500.0, at::kFloat),
                      text.narrow(2, 0, d),
                      text.narrow(2, d, d), text.select(2, 2 * d).contiguous(),
                      ltx2_video_coords(f, hw, hw, p.defaults.fps, config_).expand({2, 3, s, 2}).contiguous(),
                      ltx2_audio_coords(la, config_).expand({2, 1, la, 2}).contiguous()});
    decode_video(device, z.narrow(0, 0, 1), f, hw, hw);
    if (p.limits.image != InputUse::none) module("vae_encoder", device)->forward({at::zeros({1, 3, 1, side, side}, at::kFloat)});
  }
}

CacheStats Ltx2Family::text_cache_stats() const { return text_cache_ ? text_cache_->stats() : CacheStats{}; }

// The family's manifest name, registered by the build's register_builtin_families()
// (cmake/family.cmake).
void register_ltx2_family() { families().add("ltx2", &make_ltx2_family); }

}  // namespace vgen
