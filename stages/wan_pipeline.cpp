#include "stages/wan_job.hpp"

#include "stages/job_batcher.hpp"

#include "runtime/content_key.hpp"
#include "runtime/errors.hpp"
#include "stages/model_backend.hpp"
#include "stages/text_context.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <regex>

namespace vgen {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// WanPipeline's prompt_clean without ftfy: HTML-unescape (twice), collapse whitespace, strip.
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

std::string prompt_clean(const std::string& text) {
  static const std::regex spaces("\\s+");
  auto s = std::regex_replace(html_unescape(html_unescape(text)), spaces, " ");
  const auto b = s.find_first_not_of(' ');
  const auto e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

SchedulerParams to_params(const json::object& config) {
  SchedulerParams p;
  for (const auto& kv : config) {
    const auto& v = kv.value();
    SchedulerParam x;
    if (v.is_bool()) x = v.get_bool();
    else if (v.is_number()) x = v.to_number<double>();
    else if (v.is_string()) x = std::string(v.get_string());
    else if (v.is_array()) {
      std::vector<double> xs;
      for (const auto& e : v.get_array())
        if (e.is_number()) xs.push_back(e.to_number<double>());
      x = std::move(xs);
    }
    p.emplace(std::string(kv.key()), std::move(x));
  }
  return p;
}

// The texts' embedding rows, [texts, L, D] with L the longest prompt, and each text's length.
// A padding-invariant encoder (UMT5) runs only up to the longest prompt, as its masked output
// is zero past each prompt anyway: a 12-token prompt costs 12 positions, not 512. An unmasked
// output keeps all max_length rows.
TextRows encode_text(WanRuntime& rt, const std::string& device, const std::vector<std::string>& texts) {
  auto batch = rt.tokenizer->encode_batch(texts);
  auto ids = at::tensor(batch.ids, at::kLong).reshape({batch.batch, batch.length});
  auto mask = at::tensor(batch.mask, at::kLong).reshape({batch.batch, batch.length});
  std::int64_t run = batch.length;
  if (rt.package.text_padding_invariant && !batch.lengths.empty())
    run = std::clamp<std::int64_t>(*std::max_element(batch.lengths.begin(), batch.lengths.end()), 1, batch.length);
  auto out = wan_module(rt, "text_encoder", device)
                 ->forward({ids.narrow(1, 0, run).contiguous(), mask.narrow(1, 0, run).contiguous()})
                 .to(at::kFloat);
  if (!rt.package.text_output_masked)
    return {pad_rows(out, batch.length), std::vector<std::int64_t>(texts.size(), batch.length)};
  // Rows past the longest prompt are zero: drop them (an encoder that is not padding-invariant
  // ran on all max_length tokens).
  std::vector<std::int64_t> lengths(batch.lengths.begin(), batch.lengths.end());
  const std::int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  return {out.narrow(1, 0, std::min(out.size(1), longest)), std::move(lengths)};
}

ContentKey text_key(const WanRuntime& rt, const std::string& device, const std::string& text) {
  return content_key("text_embedding", json::object{{"package", rt.package.id()}, {"device", device}, {"text", text}});
}

asio::awaitable<void> preprocess(WanRuntime& rt, Job& job) {
  auto w = std::make_shared<WanJob>();
  w->spec = parse_wan_job(rt.package, job.spec());
  job.payload = std::move(w);
  co_await rt.batcher->join(rt, job, BatchKind::preprocess);
}

asio::awaitable<void> denoise(WanRuntime& rt, Job& job) { co_await rt.batcher->join(rt, job); }

asio::awaitable<void> decode(WanRuntime& rt, Job& job) { co_await rt.batcher->join(rt, job, BatchKind::decode); }

VideoFrames to_video_frames(const at::Tensor& frames, double fps) {
  auto bytes = (frames * 255.0).round().clamp(0, 255).to(at::kByte).contiguous();
  VideoFrames v = VideoFrames::allocate(static_cast<int>(frames.size(2)), static_cast<int>(frames.size(1)),
                                        static_cast<int>(frames.size(0)), fps);
  std::memcpy(v.rgb.data(), bytes.data_ptr<std::uint8_t>(), v.rgb.size());
  return v;
}

asio::awaitable<void> encode(WanRuntime& rt, Job& job) {
  auto& w = wan_job(job);
  auto options = rt.options.encode;
  options.format = w.spec.format;
  options.comment = "vgen:" + job_content_key(rt.package.id(), w.spec).hex();
  const std::string stem = w.spec.name.empty() ? job.id() : w.spec.name;
  w.output = rt.options.out_dir / (stem + extension_for(options.format));
  auto write = [&w, options] { encode_to_file(to_video_frames(w.frames, w.spec.fps), w.output, options); };
  co_await rt.executor->pool("codec").run(write);
}

}  // namespace

void prepare_jobs(WanRuntime& rt, const std::string& device, const std::vector<WanJob*>& jobs) {
  // Each distinct text once: from the cache, from an earlier job of this group (counted as a
  // hit: it was not encoded for this job), or encoded with the group's other misses.
  std::map<std::string, at::Tensor> known;
  std::vector<std::string> misses;
  auto want = [&](const std::string& text) {
    if (known.count(text)) return true;
    if (rt.text_cache)
      if (auto found = rt.text_cache->get(text_key(rt, device, text))) {
        known.emplace(text, *found);
        return true;
      }
    known.emplace(text, at::Tensor());
    misses.push_back(text);
    return false;
  };
  std::vector<std::pair<std::string, std::string>> texts;  // per job: cleaned prompt, negative ("" without CFG)
  for (auto* w : jobs) {
    const bool cfg = w->spec.guidance > 1.0;
    texts.emplace_back(prompt_clean(w->spec.prompt), cfg ? prompt_clean(w->spec.negative_prompt) : std::string());
    const bool hit_cond = want(texts.back().first);
    const bool hit_uncond = !cfg || want(texts.back().second);
    w->text_cache_hit = hit_cond && hit_uncond;
  }
  if (!misses.empty()) {
    auto encoded = encode_text(rt, device, misses);
    for (std::size_t i = 0; i < misses.size(); ++i) {
      // The text's own rows [1, length, D] (its length is its row count from here on), copied
      // so that a cached embedding does not keep the whole batch alive.
      auto e = encoded.embeds.narrow(0, static_cast<std::int64_t>(i), 1).narrow(1, 0, encoded.lengths[i]).clone();
      known[misses[i]] = e;
      if (rt.text_cache) rt.text_cache->put(text_key(rt, device, misses[i]), e, static_cast<std::size_t>(e.numel() * e.element_size()));
    }
  }
  const auto& p = rt.package;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    auto* w = jobs[j];
    const auto& cond = known.at(texts[j].first);
    std::vector<TextRows> rows{{cond, {cond.size(1)}}};
    if (w->spec.guidance > 1.0) {
      const auto& uncond = known.at(texts[j].second);
      rows.push_back({uncond, {uncond.size(1)}});
    }
    auto stacked = stack_texts(rows);
    w->embeds = std::move(stacked.embeds);
    w->embed_lengths = std::move(stacked.lengths);
    // Initial noise from the job's own seed on a CPU generator: the same on every device.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(w->spec.seed);
    w->latents = at::randn({1, p.latent_channels, (w->spec.frames - 1) / p.temporal_scale + 1,
                            w->spec.height / p.spatial_scale, w->spec.width / p.spatial_scale},
                           gen, at::TensorOptions().dtype(at::kFloat));
  }
}

const WanJob* find_wan_job(const Job& job) {
  const auto* w = std::any_cast<std::shared_ptr<WanJob>>(&job.payload);
  return w ? w->get() : nullptr;
}

std::shared_ptr<WanJob> shared_wan_job(Job& job) {
  auto* w = std::any_cast<std::shared_ptr<WanJob>>(&job.payload);
  if (!w || !*w) throw_error(ErrorKind::internal, "job " + job.id() + " has no Wan payload");
  return *w;
}

WanJob& wan_job(Job& job) { return *shared_wan_job(job); }  // the payload keeps it alive

asio::awaitable<Placement> place(WanRuntime& rt) {
  PlacementRequest req;
  req.model = rt.package.id();
  Placement p;
  p.lease = co_await rt.devices->acquire(req, asio::use_awaitable);
  p.device = p.lease.device().id;
  p.pool = &rt.executor->pool(device_pool_name(p.device));
  co_return p;
}

std::shared_ptr<const Module> wan_module(WanRuntime& rt, const std::string& component, const std::string& device) {
  const auto& c = rt.package.component(component);
  return ModuleCache::instance().get(rt.options.backend, c.file, device, parse_dtype(c.dtype));
}

at::Tensor predict_flow(WanRuntime& rt, const std::string& device, const at::Tensor& x, const at::Tensor& t,
                        const at::Tensor& context, const at::Tensor& bias) {
  auto transformer = wan_module(rt, "transformer", device);
  auto in = x.to(transformer->dtype());
  auto c = context.to(transformer->dtype());
  if (!bias.defined()) return transformer->forward({in, t, c});
  return transformer->call("forward_compact", {in, t, c, bias});  // float32 bias: the graph casts it
}

JobSpec parse_wan_job(const ModelPackage& package, const json::value& spec) {
  auto limits = package.limits;
  limits.schedulers = scheduler_names();
  return parse_job_spec(spec, package.defaults, limits);
}

std::unique_ptr<Scheduler> make_job_scheduler(const ModelPackage& package, const std::string& override_type) {
  if (override_type.empty() || override_type == package.scheduler_type)
    return make_scheduler(package.scheduler_type, to_params(package.scheduler_config));
  // Another scheduler: carry over the training steps and the flow shift, nothing else.
  json::object carried;
  const auto& c = package.scheduler_config;
  if (const auto* n = c.if_contains("num_train_timesteps")) carried["num_train_timesteps"] = *n;
  const json::value* shift = c.if_contains("flow_shift");
  if (!shift) shift = c.if_contains("shift");
  if (shift && override_type == "FlowMatchEulerDiscreteScheduler") carried["shift"] = *shift;
  if (shift && override_type == "UniPCMultistepScheduler") {
    carried["flow_shift"] = *shift;
    carried["use_flow_sigmas"] = true;
    carried["prediction_type"] = "flow_prediction";
  }
  return make_scheduler(override_type, to_params(carried));
}

std::shared_ptr<WanRuntime> make_wan_runtime(const std::filesystem::path& package_dir, Executor& executor,
                                             DevicePool& devices, WanRuntimeOptions options) {
  auto rt = std::make_shared<WanRuntime>();
  rt->package = load_model_package(package_dir);
  const auto& p = rt->package;
  rt->tokenizer = Tokenizer::load(p.component("tokenizer").file,
                                  {.max_length = p.max_length, .pad_id = p.pad_id, .eos_id = p.eos_id, .add_eos = p.add_eos});
  rt->executor = &executor;
  rt->devices = &devices;
  if (options.text_cache_entries > 0)
    rt->text_cache = std::make_shared<TtlCache<at::Tensor>>(TtlCacheOptions{
        .max_entries = options.text_cache_entries, .max_cost = 1ull << 30, .default_ttl = options.text_cache_ttl});
  rt->batcher = std::make_shared<JobBatcher>(options.max_batch, options.batch_wait, options.metrics);
  rt->options = std::move(options);
  return rt;
}

void warm_up(WanRuntime& rt, const std::string& device) {
  const auto& p = rt.package;
  const auto& lim = p.limits;
  const int side = std::max(lim.size_multiple, (lim.min_size + lim.size_multiple - 1) / lim.size_multiple * lim.size_multiple);
  const int frames = std::clamp(lim.frames_step + 1, lim.min_frames, lim.max_frames);  // two latent frames: first + step chunks
  const std::int64_t lf = (frames - 1) / p.temporal_scale + 1, lh = side / p.spatial_scale, lw = side / p.spatial_scale;
  auto vae = wan_module(rt, "vae_decoder", device);
  for (int call = 0; call < 2; ++call) {
    auto text = encode_text(rt, device, {"warm up", ""});  // cond and uncond rows, as with guidance
    const auto rows = context_rows(text.lengths, p.max_length, p.transformer_compact_context);
    const auto inputs = make_context(text, rows, p.max_length, p.transformer_compact_context);
    auto z = at::zeros({2, p.latent_channels, lf, lh, lw}, at::kFloat);
    auto t = at::full({2}, 500.0, at::kFloat);
    predict_flow(rt, device, z, t, inputs.context, inputs.bias);
    vae->forward({z.narrow(0, 0, 1).to(vae->dtype())});
  }
}

const ModelPackage& package_of(const WanRuntime& runtime) { return runtime.package; }

CacheStats text_cache_stats(const WanRuntime& runtime) {
  return runtime.text_cache ? runtime.text_cache->stats() : CacheStats{};
}

std::map<std::size_t, std::uint64_t> preprocess_group_sizes(const WanRuntime& runtime) {
  return runtime.batcher->group_sizes(BatchKind::preprocess);
}
std::map<std::size_t, std::uint64_t> denoise_group_sizes(const WanRuntime& runtime) { return runtime.batcher->group_sizes(); }
std::map<std::size_t, std::uint64_t> decode_group_sizes(const WanRuntime& runtime) {
  return runtime.batcher->group_sizes(BatchKind::decode);
}

WanJobResult wan_job_result(const Job& job) {
  const auto* w = find_wan_job(job);
  if (!w) throw_error(ErrorKind::internal, "job " + job.id() + " has no Wan result");
  return {w->spec, w->output, w->text_cache_hit, w->device};
}

std::vector<StageSpec> make_wan_stages(std::shared_ptr<WanRuntime> rt) {
  auto bind = [rt](asio::awaitable<void> (*fn)(WanRuntime&, Job&)) {
    return StageFn([rt, fn](Job& job) { return fn(*rt, job); });
  };
  return {
      // Each job waiting in a forming batch holds a worker: at least max_batch of them.
      {"preprocess", JobState::preprocess, std::max(rt->options.preprocess_workers, rt->options.max_batch), 16, bind(preprocess)},
      {"denoise", JobState::denoise, std::max(rt->options.denoise_workers, rt->options.max_batch), 4, bind(denoise)},
      {"decode", JobState::decode, std::max(rt->options.decode_workers, rt->options.max_batch), 4, bind(decode)},
      {"encode", JobState::encode, rt->options.encode_workers, 4, bind(encode)},
  };
}

}  // namespace vgen
