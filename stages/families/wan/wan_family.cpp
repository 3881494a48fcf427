#include "stages/families/wan/wan_family.hpp"

#include "stages/families/family_kit.hpp"

#include "runtime/content_key.hpp"
#include "runtime/errors.hpp"
#include "stages/exec/chunked_decode.hpp"
#include "stages/exec/tiled_decode.hpp"
#include "stages/text/text_lookup.hpp"
#include "stages/model/cuda_graph_calls.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <regex>

namespace vgen {

namespace json = boost::json;

namespace {

std::string html_unescape(const std::string& s) {
  static const std::pair<const char*, const char*> named[] = {
      {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}, {"&apos;", "'"}, {"&nbsp;", "\xc2\xa0"}};
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    bool done = false;
    if (s[i] == '&') {
      for (auto [from, to] : named)
        if (s.compare(i, std::strlen(from), from) == 0) {
          out += to;
          i += std::strlen(from);
          done = true;
          break;
        }
    }
    if (!done) out += s[i++];
  }
  return out;
}

WanJob& wan(FamilyJob& job) { return static_cast<WanJob&>(job); }
const WanJob& wan(const FamilyJob& job) { return static_cast<const WanJob&>(job); }

}  // namespace

std::string wan_prompt_clean(const std::string& text) {
  static const std::regex spaces("\\s+");
  auto s = std::regex_replace(html_unescape(html_unescape(text)), spaces, " ");
  const auto b = s.find_first_not_of(' ');
  const auto e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

namespace {

// The config with `shift` as its flow shift (a job's, a LoRA's or the package's suggested
// shift, issue 22); a scheduler whose sigmas take no flow shift refuses it, naming "shift".
json::object with_flow_shift(json::object config, const std::string& type, double shift) {
  if (shift <= 0) return config;
  auto flag = [&](const char* key) { const auto* v = config.if_contains(key); return v && v->is_bool() && v->get_bool(); };
  auto refuse = [&](const std::string& why) {
    throw_error(ErrorKind::invalid_argument, "shift: scheduler " + type + " " + why);
  };
  if (type == "FlowMatchEulerDiscreteScheduler") {
    if (flag("use_dynamic_shifting")) refuse("shifts by the latent size (use_dynamic_shifting)");
    config["shift"] = shift;
  } else if (type == "UniPCMultistepScheduler") {
    if (!flag("use_flow_sigmas")) refuse("has no flow shift without use_flow_sigmas");
    config["flow_shift"] = shift;
  } else {
    refuse("has no flow shift");
  }
  return config;
}

}  // namespace

std::unique_ptr<Scheduler> make_wan_scheduler(const ModelPackage& package, const std::string& override_type, double shift) {
  if (override_type.empty() || override_type == package.scheduler_type)
    return make_scheduler(package.scheduler_type,
                          scheduler_params_of(with_flow_shift(package.scheduler_config, package.scheduler_type, shift)));
  // Another scheduler: carry over the training steps and the flow shift, nothing else.
  json::object carried;
  const auto& c = package.scheduler_config;
  if (const auto* n = c.if_contains("num_train_timesteps")) carried["num_train_timesteps"] = *n;
  const json::value* flow_shift = c.if_contains("flow_shift");
  if (!flow_shift) flow_shift = c.if_contains("shift");
  if (flow_shift && override_type == "FlowMatchEulerDiscreteScheduler") carried["shift"] = *flow_shift;
  if (flow_shift && override_type == "UniPCMultistepScheduler") {
    carried["flow_shift"] = *flow_shift;
    carried["use_flow_sigmas"] = true;
    carried["prediction_type"] = "flow_prediction";
  }
  return make_scheduler(override_type, scheduler_params_of(with_flow_shift(std::move(carried), override_type, shift)));
}

WanConfig read_wan_config(const ModelPackage& package) {
  const auto& m = package.manifest;
  // Optional flags (absent in older packages): false unless the manifest says true.
  auto flag = [&m](const char* section, const char* key) {
    const auto* s = m.if_contains(section);
    const auto* a = s && s->is_object() ? s->get_object().if_contains(key) : nullptr;
    return a && a->is_bool() && a->get_bool();
  };
  WanConfig c;
  c.text_padding_invariant = flag("text_encoder", "padding_invariant");
  c.text_output_masked = flag("text_encoder", "output_masked");
  // The compact path also needs the method itself in the manifest's list for the transformer.
  bool has_compact_method = false;
  const auto* comps = m.if_contains("components");
  if (const auto* t = comps && comps->is_object() ? comps->get_object().if_contains("transformer") : nullptr; t && t->is_object())
    if (const auto* methods = t->get_object().if_contains("methods"); methods && methods->is_array())
      for (const auto& name : methods->get_array()) has_compact_method |= name.is_string() && name.get_string() == "forward_compact";
  c.transformer_compact_context = c.text_output_masked && has_compact_method && flag("transformer", "compact_context");
  return c;
}

WanFamily::WanFamily(ModelPackage package, const FamilyOptions& options)
    : package_(std::move(package)), config_(read_wan_config(package_)), backend_(options.backend) {
  const auto& p = package_;
  for (const char* name : {"tokenizer", "text_encoder", "transformer", "vae_decoder"}) p.component(name);  // named if missing
  if (p.limits.video != InputUse::none) p.component("vae_encoder");  // video-to-video encodes the input video
  tokenizer_ = Tokenizer::load(p.component("tokenizer").file,
                               {.max_length = p.max_length, .pad_id = p.pad_id, .eos_id = p.eos_id, .add_eos = p.add_eos});
  // Two experts: the manifest's `experts` section (stages/model_package reads only what every
  // family shares, so the family reads its own section).
  const auto* ex = p.manifest.if_contains("experts");
  if (ex) {
    const auto* ratio = ex->is_object() ? ex->as_object().if_contains("boundary_ratio") : nullptr;
    if (!ratio || !ratio->is_number() || ratio->to_number<double>() <= 0 || ratio->to_number<double>() >= 1)
      throw Error(ErrorKind::invalid_argument, "model package " + p.dir.string() + ": manifest field 'experts.boundary_ratio' must be a number in (0, 1)");
    p.component("transformer_2");
    double train = 1000;
    if (const auto* n = p.scheduler_config.if_contains("num_train_timesteps"); n && n->is_number()) train = n->to_number<double>();
    boundary_timestep_ = ratio->to_number<double>() * train;
  }
  text_cache_ = make_text_cache(options);
  loras_ = std::make_shared<LoraLibrary>(options.lora.dir);
  variants_ = std::make_shared<LoraVariants>(options.lora.cache_bytes);
  check_tiled_decode_options(options.decode, p.spatial_scale);
  tiling_ = options.decode;
  if (const auto* d = p.manifest.if_contains("decode")) {
    if (!d->is_object()) throw Error(ErrorKind::invalid_argument, "model package " + p.dir.string() + ": manifest field 'decode' must be an object");
    tiling_ = read_tiled_decode_options(d->get_object(), tiling_, "model package " + p.dir.string(), p.spatial_scale);
  }
}

std::shared_ptr<Family> make_wan_family(ModelPackage package, const FamilyOptions& options) {
  return std::make_shared<WanFamily>(std::move(package), options);
}

JobSpec WanFamily::validate(const json::value& spec) const {
  auto limits = package_.limits;
  limits.schedulers = scheduler_names();
  auto s = parse_job_spec(spec, package_.defaults, limits);
  if (!s.loras.empty()) validate_loras(s, spec.as_object(), limits);
  if (s.shift > 0) make_wan_scheduler(package_, s.scheduler, s.shift);  // a scheduler without a flow shift: named here
  if (!s.video.empty() && video_use() == VideoUse::start) validate_video(s);
  return s;
}

void WanFamily::validate_loras(JobSpec& s, const json::object& fields, const SpecLimits& limits) const {
  if (boundary_timestep_ >= 0)
    throw Error(ErrorKind::invalid_argument, "loras: not supported by the two-expert " + package_.family + " package");
  // A quantized Linear packs its weight: there is no float matrix to add the LoRA's product to.
  if (is_quantized_precision(s.precision))
    throw Error(ErrorKind::invalid_argument, "loras: not supported with precision " + s.precision + " (use a float precision)");
  // LoRAs: each file resolved under lora_dir and hashed (its sha256 joins the content key) and
  // mapped onto the transformer's parameters, so a file that fits no layer is refused here
  // (exit 2 / HTTP 400), before anything runs. The parameter shapes come from a loaded
  // transformer; before any job has loaded one, the first LoRA job's validation loads a CPU
  // copy once to read them (and drops it: it is not the device's module).
  auto set = loras_->resolve(s.loras);
  {
    std::lock_guard lock(shapes_mutex_);
    if (transformer_shapes_.empty()) {
      const auto& c = package_.component("transformer");
      transformer_shapes_ = parameter_shapes(*load_module(c.format, c.file, "cpu", parse_dtype(c.dtype)));
    }
    for (const auto& c : set) c.file->map_onto(transformer_shapes_);
  }
  // The files' suggested steps / guidance / shift, for the fields the job leaves out.
  std::vector<NamedSuggestion> suggestions;
  for (std::size_t i = 0; i < set.size(); ++i) suggestions.push_back({s.loras[i].name, set[i].file->suggestion()});
  apply_lora_suggestions(s, fields, suggestions, limits);
}

std::shared_ptr<FamilyJob> WanFamily::create_job(JobSpec spec) const {
  auto w = std::make_shared<WanJob>();
  w->spec = std::move(spec);
  return w;
}

std::shared_ptr<const Module> WanFamily::module(const std::string& component, const std::string& device) const {
  auto m = ModuleCache::instance().get_component(package_, component, device, backend_);
  if (component == "transformer") {
    std::lock_guard lock(shapes_mutex_);
    if (transformer_shapes_.empty()) transformer_shapes_ = parameter_shapes(*m);
  }
  return m;
}

// The transformer a denoise group runs on: the package's, or (with LoRAs; every job of the
// group has the same set, the denoise key says so) its merged variant from the LRU, which the
// group's jobs then hold until they finish, so an eviction never frees it mid-loop.
std::shared_ptr<const Module> WanFamily::group_transformer(const std::vector<FamilyJob*>& live, const std::string& device) {
  auto& first = wan(*live.front());
  if (first.spec.loras.empty()) return nullptr;
  if (first.transformer) return first.transformer;
  auto refs = first.spec.loras;
  auto set = loras_->resolve(refs);
  for (std::size_t i = 0; i < refs.size(); ++i)
    if (refs[i].sha256 != first.spec.loras[i].sha256)
      throw_error(ErrorKind::invalid_argument, "loras: '" + refs[i].name + "' changed since the job was accepted");
  // merged into the TorchScript transformer: a compiled one holds its weights inside its library
  auto merged = variants_->get(ModuleCache::instance().get_component(package_, "transformer", device,
                                                                     backend_ == "auto" ? "torchscript" : backend_),
                               lora_set_key(refs), set);
  for (auto* j : live) wan(*j).transformer = merged;
  return merged;
}

// The texts' embedding rows, [texts, L, D] with L the longest prompt, and each text's length.
// A padding-invariant encoder (UMT5) runs only up to the longest prompt, as its masked output
// is zero past each prompt anyway: a 12-token prompt costs 12 positions, not 512. An unmasked
// output keeps all max_length rows.
TextRows WanFamily::encode_text(const std::string& device, const std::vector<std::string>& texts) {
  auto batch = tokenizer_->encode_batch(texts);
  auto ids = at::tensor(batch.ids, at::kLong).reshape({batch.batch, batch.length});
  auto mask = at::tensor(batch.mask, at::kLong).reshape({batch.batch, batch.length});
  std::int64_t run = batch.length;
  if (config_.text_padding_invariant && !batch.lengths.empty())
    run = std::clamp<std::int64_t>(*std::max_element(batch.lengths.begin(), batch.lengths.end()), 1, batch.length);
  auto out = module("text_encoder", device)
                 ->forward({ids.narrow(1, 0, run).contiguous(), mask.narrow(1, 0, run).contiguous()})
                 .to(at::kFloat);
  if (!config_.text_output_masked)
    return {pad_rows(out, batch.length), std::vector<std::int64_t>(texts.size(), batch.length)};
  // Rows past the longest prompt are zero: drop them (an encoder that is not padding-invariant
  // ran on all max_length tokens).
  std::vector<std::int64_t> lengths(batch.lengths.begin(), batch.lengths.end());
  const std::int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  return {out.narrow(1, 0, std::min(out.size(1), longest)), std::move(lengths)};
}

void WanFamily::prepare(const std::string& device, const std::vector<FamilyJob*>& jobs) {
  // Each distinct text once (stages/text_lookup): a hit when this job did not pay for encoding.
  TextLookup lookup(text_cache_.get(), package_.id(), device);
  std::vector<std::pair<std::string, std::string>> texts;  // per job: cleaned prompt, negative ("" without CFG)
  for (auto* w : jobs) {
    const bool cfg = w->spec.guidance > 1.0;
    texts.emplace_back(wan_prompt_clean(w->spec.prompt), cfg ? wan_prompt_clean(w->spec.negative_prompt) : std::string());
    const bool hit_cond = lookup.want(texts.back().first);
    const bool hit_uncond = !cfg || lookup.want(texts.back().second);
    w->text_cache_hit = hit_cond && hit_uncond;
  }
  lookup.encode_misses([&](const std::vector<std::string>& misses) {
    auto encoded = encode_text(device, misses);
    std::vector<at::Tensor> out;
    // The text's own rows [1, length, D] (its length is its row count from here on), copied
    // so that a cached embedding does not keep the whole batch alive.
    for (std::size_t i = 0; i < misses.size(); ++i)
      out.push_back(encoded.embeds.narrow(0, static_cast<std::int64_t>(i), 1).narrow(1, 0, encoded.lengths[i]).clone());
    return out;
  });
  const auto& p = package_;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    auto& w = wan(*jobs[j]);
    const auto& cond = lookup.get(texts[j].first);
    std::vector<TextRows> rows{{cond, {cond.size(1)}}};
    if (w.spec.guidance > 1.0) {
      const auto& uncond = lookup.get(texts[j].second);
      rows.push_back({uncond, {uncond.size(1)}});
    }
    auto stacked = stack_texts(rows);
    w.embeds = std::move(stacked.embeds);
    w.embed_lengths = std::move(stacked.lengths);
    // Video-to-video: the video's frames set the job's frame count before the noise is drawn.
    at::Tensor video;
    if (video_use() != VideoUse::own && (!w.spec.video.empty() || w.video.defined())) {
      video = wan_job_video(w, p.temporal_scale);
      w.spec.frames = static_cast<int>(video.size(0));
    }
    // Initial noise from the job's own seed on a CPU generator: the same on every device.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(w.spec.seed);
    w.state.step = 0;
    w.state.latents = at::randn({1, p.latent_channels, (w.spec.frames - 1) / p.temporal_scale + 1 + extra_latent_frames(w),
                                 w.spec.height / p.spatial_scale, w.spec.width / p.spatial_scale},
                                gen, at::TensorOptions().dtype(at::kFloat));
    if (video.defined() && video_use() == VideoUse::start) start_from_video(device, w, video, w.state.latents);
    if (video.defined() && video_use() == VideoUse::control) w.video = video;  // the control video, decoded once
    condition(device, w);
  }
}

void WanFamily::condition(const std::string&, WanJob&) {}

// Image-to-video (Wan 2.1): each job's mask and condition latents after its latents' channels.
at::Tensor WanFamily::denoiser_input(const std::vector<FamilyJob*>& jobs, const at::Tensor& x) const {
  std::vector<at::Tensor> conditions;
  for (auto* j : jobs)
    if (wan(*j).condition.defined()) conditions.push_back(wan(*j).condition);
  if (conditions.empty()) return x;
  auto c = conditions.size() == 1 ? conditions[0] : at::cat(conditions, 0);
  return at::cat({x, c.to(x.scalar_type())}, 1);
}

at::Tensor WanFamily::denoiser_timesteps(const std::vector<FamilyJob*>&, const at::Tensor&, const at::Tensor& t) const { return t; }

std::vector<at::Tensor> WanFamily::extra_inputs(const std::vector<FamilyJob*>&) const { return {}; }

std::int64_t WanFamily::extra_latent_frames(const WanJob&) const { return 0; }

std::unique_ptr<Scheduler> WanFamily::make_scheduler(const FamilyJob& job) const {
  auto s = make_wan_scheduler(package_, job.spec.scheduler, job.spec.shift);
  s->set_timesteps(job.spec.steps);
  return s;
}

std::string WanFamily::denoise_key(const FamilyJob& job, const Scheduler& s) const {
  const auto& w = wan(job);
  std::string k = key_prefix() + "|" + std::string(s.name()) + "|" + std::to_string(w.spec.steps) + "|" +
                  (w.spec.guidance > 1.0 ? "cfg" : "nocfg");
  if (!w.spec.loras.empty()) k += "|lora:" + lora_set_key(w.spec.loras);  // one merged transformer per group
  if (!w.spec.precision.empty()) k += "|precision:" + w.spec.precision;    // one transformer variant per call
  if (w.spec.shift > 0) {  // other sigmas: another group
    char shift[32];
    std::snprintf(shift, sizeof shift, "|shift:%.17g", w.spec.shift);
    k += shift;
  }
  for (auto d : w.state.latents.sizes()) k += "|" + std::to_string(d);
  // Text rows of any length share a call: the group pads them to one row count.
  return k + "|" + std::to_string(w.embeds.size(0)) + "x" + std::to_string(w.embeds.size(2));
}

// One text row count for the whole group: max_length, or with a compact-context package the
// group's longest text + 1 (stages/text_context.hpp).
void WanFamily::begin_denoise(const std::vector<FamilyJob*>& group, const std::string&) {
  const auto& p = package_;
  std::vector<std::int64_t> lengths;
  for (auto* j : group) lengths.insert(lengths.end(), wan(*j).embed_lengths.begin(), wan(*j).embed_lengths.end());
  const auto rows = context_rows(lengths, p.max_length, config_.transformer_compact_context);
  for (auto* j : group) {
    auto& w = wan(*j);
    w.text = make_context({w.embeds, w.embed_lengths}, rows, p.max_length, config_.transformer_compact_context);
  }
}

const std::string& WanFamily::expert_for(double timestep) const {
  static const std::string high = "transformer", low = "transformer_2";
  return boundary_timestep_ >= 0 && timestep < boundary_timestep_ ? low : high;
}

// Two experts and rows at different steps (jobs that joined a running group): each expert
// gets its own rows in one call, and the predictions go back in row order. Undefined when
// every row has the same expert (the usual case: one call).
at::Tensor WanFamily::predict_by_expert(const PredictCall& call) {
  if (boundary_timestep_ < 0) return {};
  const auto ts = call.timestep.to(at::kDouble).reshape({-1}).contiguous();
  if (ts.numel() < 2) return {};
  std::map<std::string, std::vector<std::int64_t>> rows;
  for (std::int64_t r = 0; r < ts.numel(); ++r) rows[expert_for(ts[r].item<double>())].push_back(r);
  if (rows.size() < 2) return {};
  at::Tensor out;
  for (const auto& [expert, idx] : rows) {
    std::vector<FamilyJob*> jobs;
    for (auto r : idx) jobs.push_back(call.jobs[static_cast<std::size_t>(r)]);
    const auto index = at::tensor(idx, at::kLong);
    const auto x = call.x.index_select(0, index);
    const auto t = ts.index_select(0, index).to(call.timestep.scalar_type());
    auto pred = predict(PredictCall{jobs, x, t, call.device});
    if (!out.defined()) {
      std::vector<std::int64_t> shape(pred.sizes().begin(), pred.sizes().end());
      shape[0] = call.x.size(0);
      out = at::zeros(shape, pred.options());
    }
    out.index_copy_(0, index, pred);
  }
  return out;
}

at::Tensor WanFamily::predict_flow(const std::string& device, const at::Tensor& x, const at::Tensor& t,
                                   const at::Tensor& context, const at::Tensor& bias, const at::Tensor& image,
                                   std::shared_ptr<const Module> transformer, const std::vector<at::Tensor>& extras) {
  if (!transformer) transformer = with_cuda_graphs(module("transformer", device), package_, "transformer");
  auto in = x.to(transformer->dtype());
  auto c = context.to(transformer->dtype());
  if (!extras.empty()) {
    std::vector<at::Tensor> args{in, t, c};
    args.insert(args.end(), extras.begin(), extras.end());
    return transformer->forward(args);
  }
  if (image.defined()) return transformer->forward({in, t, c, image.to(transformer->dtype())});
  if (!bias.defined()) return transformer->forward({in, t, c});
  return transformer->call("forward_compact", {in, t, c, bias});  // float32 bias: the graph casts it
}

// One transformer call (each job's cond and uncond rows together), then each job's guidance
// in the transformer's dtype, as WanPipeline does (so a bf16 package follows diffusers' bf16
// numerics too).
at::Tensor WanFamily::predict(const PredictCall& call) {
  if (auto split = predict_by_expert(call); split.defined()) return split;
  const auto& live = call.jobs;
  const bool cfg = live.front()->spec.guidance > 1.0;
  std::vector<at::Tensor> contexts, biases, images;
  for (auto* j : live) {
    contexts.push_back(wan(*j).text.context);  // [2 or 1, rows, D]: cond (, uncond)
    if (wan(*j).text.bias.defined()) biases.push_back(wan(*j).text.bias);
    if (wan(*j).image_embeds.defined()) images.push_back(wan(*j).image_embeds);
  }
  auto cat = [](const std::vector<at::Tensor>& xs) { return xs.empty() ? at::Tensor() : xs.size() == 1 ? xs[0] : at::cat(xs, 0); };
  auto x = denoiser_input(live, call.x);
  auto input = cfg ? x.repeat_interleave(2, 0) : x;  // job j's rows 2j (cond), 2j+1 (uncond)
  auto image = images.empty() ? at::Tensor() : cfg ? cat(images).repeat_interleave(2, 0) : cat(images);
  auto t = denoiser_timesteps(live, call.x, row_timesteps(call));  // float32 always; rows per job
  t = (cfg ? t.repeat_interleave(2, 0) : t).contiguous();
  // Two experts: the one for these rows' timestep (predict_by_expert split the rows so that they
  // share one). LoRAs are merged into the package's single transformer only (validate refuses
  // them with two experts).
  const auto& expert = expert_for(call.timestep.reshape({-1})[0].item<double>());
  // The job's precision picks the variant (all rows share it: the denoise key says so).
  auto transformer = expert == "transformer" ? group_transformer(live, call.device) : nullptr;
  if (!transformer) {  // (a LoRA variant is not graphed: cuda_graph_calls.hpp's with_cuda_graphs keeps what it wraps)
    const auto& name = package_.component_for(expert, live.front()->spec.precision);
    transformer = with_cuda_graphs(module(name, call.device), package_, name);  // model_backend.cuda_graphs
  }
  auto extras = extra_inputs(live);
  for (auto& e : extras) e = cfg ? e.repeat_interleave(2, 0) : e;
  auto pred = predict_flow(call.device, input, t, cat(contexts), cat(biases), image, transformer, extras).to(at::kCPU);
  if (!cfg) return pred;
  auto cond = pred.slice(0, 0, pred.size(0), 2), uncond = pred.slice(0, 1, pred.size(0), 2);
  const double g = live.front()->spec.guidance;
  if (std::all_of(live.begin(), live.end(), [g](auto* j) { return j->spec.guidance == g; }))
    return uncond + g * (cond - uncond);
  std::vector<at::Tensor> rows;
  for (std::size_t j = 0; j < live.size(); ++j) {
    const auto r = static_cast<std::int64_t>(j);
    rows.push_back(uncond.narrow(0, r, 1) + live[j]->spec.guidance * (cond.narrow(0, r, 1) - uncond.narrow(0, r, 1)));
  }
  return at::cat(rows, 0);
}

namespace {

// The clip decoded a latent frame at a time (stages/exec/chunked_decode.hpp) for a group with a
// watched job: each chunk [N, 3, T, H, W] becomes each watching job's next frames exactly as
// the whole clip becomes `frames` below (the same elementwise formula, so the same values). A
// module that turns out to lack the packed methods (a compiled file served in the package's
// place) decodes whole, before any frame is handed out.
at::Tensor decode_in_chunks(const Module& vae, const at::Tensor& z, const std::vector<FamilyJob*>& jobs) {
  // Copies: a sink that throws is dropped here, not on the job (the stage clears it after).
  std::vector<std::function<void(const at::Tensor&)>> sinks;
  for (auto* j : jobs) sinks.push_back(j->on_frames);
  ChunkedDecoder decoder(vae);
  std::vector<at::Tensor> chunks;
  for (std::int64_t i = 0; i < z.size(2); ++i) {
    try {
      chunks.push_back(decoder.next(z.narrow(2, i, 1)));
    } catch (const Error& e) {
      if (i > 0 || e.kind() != ErrorKind::invalid_argument) throw;
      return vae.forward({z});
    }
    const auto& chunk = chunks.back();
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      if (!sinks[j]) continue;
      // A sink is one watched job's encoder: its failure must not fail the batch-mates' decode.
      // That job's streamed encode then ends short and the encode stage encodes it whole.
      try {
        sinks[j](clip_frames(chunk[static_cast<std::int64_t>(j)].to(at::kFloat)));
      } catch (const std::exception&) {
        sinks[j] = nullptr;
      }
    }
  }
  return at::cat(chunks, 2);
}

}  // namespace

// One VAE call: un-normalise each job's latents, decode them as one batch, split the frames
// back ([F, H, W, 3] in [0, 1] per job).
void WanFamily::decode(const std::string& device, const std::vector<FamilyJob*>& jobs) {
  const auto& p = package_;
  const auto c = p.latent_channels;
  auto mean = at::tensor(p.latents_mean, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  auto std = at::tensor(p.latents_std, at::kDouble).to(at::kFloat).view({1, c, 1, 1, 1});
  std::vector<at::Tensor> zs;
  for (auto* j : jobs) zs.push_back(j->state.latents);
  auto z = (zs.size() == 1 ? zs[0] : at::cat(zs, 0)) / (1.0 / std) + mean;  // exactly diffusers' un-normalisation
  auto vae = module("vae_decoder", device);
  at::Tensor video;  // [N,3,F,H,W]; tiled, not yet clamped (the frames' clamp below does it)
  if (wants_tiled_decode(tiling_, z.size(3), z.size(4), p.spatial_scale)) {
    const auto dtype = vae->dtype();
    const LatentDecoder tile = [&](const at::Tensor& zt) { return decode_tile(*vae, zt.to(dtype)); };
    // Wan VAEs downsample 8x in their convolutions; a larger scale is a patchifying VAE (Wan
    // 2.2's: 16 = 8 x a 2 x 2 patch, unpatchified inside the exported decoder).
    video = tiled_decode(z, tile, p.spatial_scale, tiling_, std::max<std::int64_t>(1, p.spatial_scale / 8));
  } else if (std::any_of(jobs.begin(), jobs.end(), [](auto* j) { return bool(j->on_frames); }) &&
             package_has_chunked_decode(p.manifest, "vae_decoder")) {
    video = decode_in_chunks(*vae, z.to(vae->dtype()), jobs);
  } else {
    video = vae->forward({z.to(vae->dtype())});
  }
  set_frames(video.to(at::kFloat), jobs);  // float32 frames, made on the decoder's device, then to the host (family_kit.hpp)
}

// decode_unclamped: packages exported since the tiled decode (tools/vgen_export/wan_vae.py). An
// older package's decoder clamps each tile to [-1, 1] before the blend, which differs from
// diffusers' tiled decode only where decoded values leave that range; it is used rather than
// refusing the package.
at::Tensor WanFamily::decode_tile(const Module& vae, const at::Tensor& z) const {
  if (vae_unclamped_.load() != 0) {
    try {
      auto out = vae.call("decode_unclamped", {z});
      vae_unclamped_.store(1);
      return out;
    } catch (const Error& e) {
      // invalid_argument is the module's "no such method"; anything else is the decode's own.
      if (e.kind() != ErrorKind::invalid_argument || vae_unclamped_.load() == 1) throw;
      vae_unclamped_.store(0);
    }
  }
  return vae.forward({z});
}

// Calls the text encoder, transformer and VAE twice at the package's smallest size, discarding
// the outputs: LibTorch's profiling executor profiles a method's first call and optimises its
// graph on the second, and both are slow (docs/PERFORMANCE.md). Bypasses the text cache.
void WanFamily::warm_up(const std::string& device) {
  const auto& p = package_;
  const auto& lim = p.limits;
  const int side = std::max(lim.size_multiple, (lim.min_size + lim.size_multiple - 1) / lim.size_multiple * lim.size_multiple);
  const int frames = std::clamp(lim.frames_step + 1, lim.min_frames, lim.max_frames);  // two latent frames: first + step chunks
  const std::int64_t lf = (frames - 1) / p.temporal_scale + 1, lh = side / p.spatial_scale, lw = side / p.spatial_scale;
  auto vae = module("vae_decoder", device);
  for (int call = 0; call < 2; ++call) {
    WanJob job;  // one job with guidance: cond and uncond rows
    job.spec = p.defaults;
    job.spec.guidance = std::max(job.spec.guidance, 2.0);
    job.spec.height = job.spec.width = side;
    job.spec.frames = frames;
    auto text = encode_text(device, {"warm up", ""});
    job.embeds = text.embeds;
    job.embed_lengths = text.lengths;
    job.state.latents = at::zeros({1, p.latent_channels, lf, lh, lw}, at::kFloat);
    job.image = at::zeros({3, side, side}, at::kFloat);  // a blank first frame, for image-to-video
    job.last_image = job.image;                           // and last frame, for first-last-frame
    condition(device, job);
    begin_denoise({&job}, device);
    const std::vector<FamilyJob*> jobs{&job};
    // Both experts when there are two: one timestep above the boundary, one below.
    for (double tv : boundary_timestep_ >= 0 ? std::vector<double>{999.0, 0.0} : std::vector<double>{500.0}) {
      const auto t = at::scalar_tensor(tv, at::kFloat);
      predict(PredictCall{jobs, job.state.latents, t, device});
    }
    // Three latent frames at least: a compiled VAE decodes from 3 (tools/vgen_export/wan_vae_aoti.py);
    // fewer would warm only the TorchScript decoder beside it.
    vae->forward({at::zeros({1, p.latent_channels, std::max<std::int64_t>(lf, 3), lh, lw}, vae->dtype())});
    // The chunked decode's methods too (a watched job's decode): their first calls are as slow.
    if (package_has_chunked_decode(p.manifest, "vae_decoder")) chunked_decode(*vae, job.state.latents.to(vae->dtype()));
  }
}

CacheStats WanFamily::text_cache_stats() const { return text_cache_ ? text_cache_->stats() : CacheStats{}; }

CacheStats WanFamily::lora_cache_stats() const {
  const auto v = variants_->stats();
  CacheStats s;
  s.hits = v.hits;
  s.misses = v.merges;  // every miss merges (and so does every get with the cache off)
  s.evictions = v.evictions;
  s.entries = v.entries;
  s.cost = v.bytes;
  return s;
}

// The family's manifest name(s), registered by the build's register_builtin_families()
// (cmake/family.cmake).
void register_wan_family() {
  families().add("wan2.1-t2v", &make_wan_family);
  families().add("wan2.2-a14b-t2v", &make_wan_family);  // two experts: WanFamily reads manifest `experts`
}

}  // namespace vgen
