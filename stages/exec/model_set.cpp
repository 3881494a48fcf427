#include "stages/exec/model_set.hpp"

#include "runtime/errors.hpp"
#include "stages/exec/batcher.hpp"
#include "stages/exec/chunked_decode.hpp"
#include "stages/exec/kept_latents.hpp"
#include "stages/exec/streamed_encodes.hpp"
#include "stages/families/family.hpp"
#include "stages/media/clip_extension.hpp"
#include "stages/media/image_admission.hpp"
#include "stages/exec/denoise_news.hpp"
#include "stages/exec/preview.hpp"
#include "stages/model/frame_bytes.hpp"
#include "stages/model/model_backend.hpp"
#include "stages/model/torch_devices.hpp"
#include "stages/post/libav_post.hpp"
#include "stages/post/rrdb_upscaler.hpp"
#include "stages/post/rife_interpolator.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <algorithm>
#include <cstring>

namespace vgen {

namespace asio = boost::asio;
namespace json = boost::json;

// The stage a running denoise group watches: higher-priority jobs waiting for it preempt rows.
constexpr std::string_view kDenoise = "denoise";

namespace {

// The package's id, plus the job's float variant when it is not the package's own weights
// (precision_model_id): what a job's content key and its base frames are keyed by.
std::string variant_id(const Family& family, const JobSpec& spec) {
  return precision_model_id(family.package().id(), family.package().base_precision, spec);
}

}  // namespace

struct ModelSet::State {
  std::vector<std::pair<std::string, std::shared_ptr<Family>>> models;  // the first is the default
  Executor* executor = nullptr;
  ModelSetOptions options;
  std::shared_ptr<Batcher> batcher;
  std::map<const Family*, std::shared_ptr<const LatentPreview>> previews;  // families with factors, when on
  std::unique_ptr<Checkpoints> checkpoints;  // null when off
  DevicePool* devices = nullptr;              // leases for model-backed post-stages
  std::shared_ptr<const PostProcessor> interpolator, upscaler;
  std::unique_ptr<BaseFrames> base_frames;  // never null; off unless options.base_frames say so
  StreamedEncodes streamed;  // watched jobs encoded while they decode
  std::unique_ptr<KeptLatents> kept_latents;  // never null
  // The lowest compute capability of the pool's CUDA devices (major * 10 + minor; -1: none is
  // CUDA): a job whose precision one of them cannot run is refused at admission, since any
  // device may be the one its denoise lands on.
  int cuda_capability = -1;
  bool bf16_emulated = false;  // devices_emulate_bf16: a CUDA device before 8.0, or a CPU without native bf16

  // The identity a job's content key names: its package's, plus the post-stage variants that
  // make its frames (a model's weights included), so configuring another interpolator or
  // upscaler never serves a clip the previous one made; a float variant (bf16 weights of a
  // float32 package) names itself too.
  std::string content_model_id(const JobSpec& spec) const {
    auto id = variant_id(*family(spec.model), spec);
    if (spec.interpolate > 1) id += "|interpolate:" + interpolator->identity();
    if (spec.upscale > 1) id += "|upscale:" + upscaler->identity();
    return id;
  }

  const std::shared_ptr<Family>& family(const std::string& name) const {
    if (name.empty()) return models.front().second;
    for (const auto& [n, f] : models)
      if (n == name) return f;
    std::string known;
    for (const auto& [n, f] : models) known += (known.empty() ? "" : ", ") + n;
    throw_error(ErrorKind::invalid_argument, "model: unknown '" + name + "' (known: " + known + ")");
  }
};

namespace {

using State = ModelSet::State;

std::string model_field(const json::value& spec) {
  if (const auto* o = spec.if_object())
    if (const auto* m = o->if_contains("model"); m && m->is_string()) return std::string(m->get_string());
  return {};
}

// The frames of an extend job's segment that the join drops: by latents (a diffusion-forcing
// package), the clip's last extend_overlap frames; else its last frame.
int join_overlap(const Family& family) { return std::max(family.package().limits.extend_overlap, 1); }

VideoFrames to_video_frames(const at::Tensor& frames, double fps) {
  const auto bytes = to_frame_bytes(frames);
  VideoFrames v = VideoFrames::allocate(static_cast<int>(frames.size(2)), static_cast<int>(frames.size(1)),
                                        static_cast<int>(frames.size(0)), fps);
  std::memcpy(v.rgb.data(), bytes.data_ptr<std::uint8_t>(), v.rgb.size());
  return v;
}

// A job whose base render is kept takes its clip as if its decode had just made it; denoise
// and decode then let it pass (their StageSpec::applies), the post-stages read post_frames.
bool reuse_base(State& st, const Family& family, FamilyJob& work) {
  if (!st.base_frames->enabled()) return false;
  auto hit = st.base_frames->get(base_content_key(variant_id(family, work.spec), work.spec));
  if (!hit) return false;
  work.post_frames = std::move(hit->frames);
  work.audio = std::move(hit->audio);
  if (st.options.metrics)
    st.options.metrics->counter("vgen_base_reused_total", "Jobs that took a kept base render and skipped denoise and decode").inc();
  return true;
}

// Whether the job still needs its base render (denoise, decode).
bool renders_base(const Job& job) {
  const auto* w = find_family_job(job);
  return !w || !w->post_frames;
}

ClipSource clip_source(const State& st, const JobSpec& spec) {
  return {.file = spec.video, .sha256 = spec.video_sha256, .width = spec.width, .height = spec.height, .limits = st.options.videos};
}

// An extend job's first frame: its video's last, fitted to the job's size, read on the "codec"
// pool before the job's group prepares (where the family conditions on it).
asio::awaitable<void> read_first_frame(State& st, FamilyJob& work) {
  auto read = [source = clip_source(st, work.spec)] {
    return std::make_shared<const RgbImage>(read_fitted_last_frame(source, "video"));
  };
  work.first_frame = co_await st.executor->pool("codec").run(read);
}

asio::awaitable<void> preprocess(State& st, Job& job) {
  const auto& family = st.family(model_field(job.spec()));
  job.payload = family->create_job(family->validate(job.spec()));
  if (reuse_base(st, *family, *family_job(job))) co_return;  // a kept base: no first frame needed either
  if (auto& work = *family_job(job); work.spec.extend) {
    if (family->package().limits.extend_overlap > 0) co_await st.kept_latents->load(work, family->package().id());
    else co_await read_first_frame(st, work);
  }
  if (auto it = st.previews.find(family.get()); it != st.previews.end()) {
    auto& work = *family_job(job);
    attach_previews(job, work, it->second, st.options.preview_every, work.spec.steps);
  }
  co_await st.batcher->join(family, job, BatchKind::preprocess);
}

// A job whose content has a valid checkpoint goes on from its step (a retry of the stage, or
// a job that was already resumed, keeps the state it has).
asio::awaitable<void> resume_from_checkpoint(State& st, Job& job, FamilyJob& work, const std::string& key) {
  if (work.state.step > 0) co_return;
  auto restore = [&] { return st.checkpoints->restore(key, work); };
  if (const int from = co_await st.executor->pool("checkpoint").run(restore); from > 0)
    report_resumed(job, from, work.spec.steps);
}

asio::awaitable<void> denoise(State& st, Job& job) {
  auto work = family_job(job);
  const auto& family = st.family(work->spec.model);
  if (!st.checkpoints) {
    co_await st.batcher->join(family, job, BatchKind::denoise);
    co_return;
  }
  const auto key = job_content_key(st.content_model_id(work->spec), work->spec).hex();  // the key the Runtime drops it by
  co_await resume_from_checkpoint(st, job, *work, key);
  st.checkpoints->begin(job, key, work->state.step);
  struct End {
    Checkpoints& c;
    Job& job;
    ~End() { c.end(job); }
  } end{*st.checkpoints, job};
  co_await st.batcher->join(family, job, BatchKind::denoise);
}

// The decoded clip in bytes (what a post-stage or encode would make of it anyway; an extend
// job's whole joined clip), kept under the job's base key. Runs after a successful decode only:
// a failed base keeps nothing.
asio::awaitable<void> keep_base(State& st, const Family& family, std::shared_ptr<FamilyJob> w) {
  if (!w->post_frames) {
    auto convert = [w] { return std::make_shared<const VideoFrames>(to_video_frames(w->frames, w->spec.fps)); };
    w->post_frames = co_await st.executor->pool("post").run(convert);
    w->frames = at::Tensor();  // the clip lives on in post_frames, in bytes
  }
  st.base_frames->put(base_content_key(variant_id(family, w->spec), w->spec), BaseClip{w->post_frames, w->audio});
}

// An extend job's output is one clip: its video's frames, then the decoded segment less its
// first (the video's last frame again), at the job's fps; the segment's sound (a family with
// sound) moves behind the video's length. Done right after decode, so the post-stages and encode
// see the whole clip, for every front end. The video is decoded again here rather than held
// from preprocess: its frames would otherwise sit in memory through the whole denoise.
asio::awaitable<void> join_input_clip(State& st, std::shared_ptr<FamilyJob> w, int overlap) {
  struct Joined {
    std::shared_ptr<const VideoFrames> frames;
    std::shared_ptr<const AudioTrack> audio;
  };
  auto join = [w, source = clip_source(st, w->spec), overlap] {
    const auto clip = read_fitted_clip(source, "video");
    Joined out{std::make_shared<const VideoFrames>(join_extension(clip, to_video_frames(w->frames, w->spec.fps), overlap)), nullptr};
    if (w->audio) out.audio = std::make_shared<const AudioTrack>(extension_audio(*w->audio, clip.count, w->spec.fps));
    return out;
  };
  auto joined = co_await st.executor->pool("codec").run(join);
  w->post_frames = std::move(joined.frames);
  w->frames = at::Tensor();  // the clip lives on in post_frames, in bytes
  if (joined.audio) w->audio = std::move(joined.audio);
}

// What the encode stage writes for a job: the options with its format and content-key comment,
// and its output path (set on the job).
EncodeOptions encode_target(const State& st, const Job& job, FamilyJob& w) {
  auto options = st.options.encode;
  options.format = w.spec.format;
  options.comment = "vgen:" + job_content_key(st.content_model_id(w.spec), w.spec).hex();
  const std::string stem = w.spec.name.empty() ? job.id() : w.spec.name;
  w.output = st.options.out_dir / (stem + extension_for(options.format));
  return options;
}

// A watched job (a client opened its live stream) whose family decodes it in time chunks and
// whose clip goes from decode straight to encode (no post-stage, not an extend job: those need
// the whole clip) is encoded while it decodes (stages/exec/streamed_encodes.hpp): the stream's
// first fragments leave during decode. Every other job (all unwatched ones) takes the
// whole-clip path unchanged. Null when the job does not qualify.
// A family decodes in chunks when its package's VAE has the packed streaming methods (Wan's,
// exported since them); one that decodes whole anyway (a tiled decode) gets its clip handed
// over after the decode: the same bytes, only later.
std::shared_ptr<StreamedEncode> start_streamed_encode(State& st, const Job& job, const Family& family, FamilyJob& w) {
  const auto& s = w.spec;
  if (!st.options.live || w.post_frames || s.extend || s.interpolate > 1 || s.upscale > 1) return nullptr;
  if (!streams_live(s.format) || !package_has_chunked_decode(family.package().manifest, "vae_decoder")) return nullptr;
  auto live = st.options.live->start(job.id());
  if (!live) return nullptr;
  auto options = encode_target(st, job, w);
  try {
    return st.streamed.start(w, std::move(options), live);
  } catch (const std::exception&) {
    // No encoder runs (no memory for the clip, no thread): the job is encoded whole after all,
    // to a fresh stream, as after a failed decode.
    live->finish(LiveBroadcast::End::failed);
    return nullptr;
  }
}

asio::awaitable<void> decode(State& st, Job& job) {
  auto w = family_job(job);
  const auto& family = st.family(w->spec.model);
  // A retried decode starts over: the previous try's encode, if any, ended with it.
  auto streamed = start_streamed_encode(st, job, *family, *w);
  std::exception_ptr failed;
  try {
    co_await st.batcher->join(family, job, BatchKind::decode);
  } catch (...) {
    failed = std::current_exception();
  }
  co_await st.streamed.end_decode(job, *w, std::move(streamed), failed);
  if (failed) std::rethrow_exception(failed);
  if (w->spec.extend) co_await join_input_clip(st, w, join_overlap(*family));
  if (st.base_frames->enabled()) co_await keep_base(st, *family, w);
}

// A post-stage: the job's clip (the last post-stage's, else the decoded frames) through the
// set's variant of `kind`, on the "post" pool or, for a model, on a leased device.
asio::awaitable<void> post_process(State& st, Job& job, PostKind kind) {
  auto w = family_job(job);
  const auto& processor = kind == PostKind::interpolate ? st.interpolator : st.upscaler;
  const int factor = kind == PostKind::interpolate ? w->spec.interpolate : w->spec.upscale;
  auto run = [w, processor, factor](const std::string& device) {
    auto in = w->post_frames ? w->post_frames : std::make_shared<const VideoFrames>(to_video_frames(w->frames, w->spec.fps));
    return std::make_shared<const VideoFrames>(processor->run(*in, factor, device));
  };
  std::shared_ptr<const VideoFrames> out;
  if (processor->uses_device()) {
    // A named request: GCC 12 frees a temporary built inside the co_await expression twice.
    PlacementRequest request;
    auto lease = co_await st.devices->acquire(request, asio::use_awaitable);
    const std::string device = lease.device().id;
    auto on_device = [run, device] { return run(device); };
    out = co_await st.executor->pool(device_pool_name(device)).run(on_device);
  } else {
    auto on_host = [run] { return run(std::string()); };
    out = co_await st.executor->pool("post").run(on_host);
  }
  w->post_frames = std::move(out);
  w->frames = at::Tensor();  // the clip lives on in post_frames, in bytes
  if (st.options.metrics)
    st.options.metrics->counter("vgen_post_frames_total", "Frames the post-stages made", {{"stage", std::string(to_string(kind))}})
        .inc(w->post_frames->count);
}

asio::awaitable<void> interpolate(State& st, Job& job) { co_await post_process(st, job, PostKind::interpolate); }
asio::awaitable<void> upscale(State& st, Job& job) { co_await post_process(st, job, PostKind::upscale); }

asio::awaitable<void> encode(State& st, Job& job) {
  auto w = family_job(job);
  const auto& package = st.family(w->spec.model)->package();
  if (co_await st.streamed.finish(job)) {
    co_await st.kept_latents->keep(*w, package.id(), package.limits.extend_overlap);  // the same decoded frames
    co_return;
  }
  auto options = encode_target(st, job, *w);
  // Only a job someone watches gets a broadcast (LiveStreams::start); ended here, once the file
  // is in place (complete) or the encode failed; the job's end ends it too (a cancel, a crash).
  std::shared_ptr<LiveBroadcast> live;
  if (st.options.live && streams_live(options.format)) live = st.options.live->start(job.id());
  auto write = [w, options, live] {
    // The sound (a family with sound; null otherwise) spans the clip: post-stages keep its length.
    if (w->post_frames) encode_to_file(*w->post_frames, w->audio.get(), w->output, options, live.get());
    else encode_to_file(to_video_frames(w->frames, w->spec.fps), w->audio.get(), w->output, options, live.get());
    if (live) live->finish(LiveBroadcast::End::complete);
  };
  try {
    co_await st.executor->pool("codec").run(write);
  } catch (...) {
    if (live) live->finish(LiveBroadcast::End::failed);
    throw;
  }
  co_await st.kept_latents->keep(*w, package.id(), package.limits.extend_overlap);
}

}  // namespace

LoadedModels load_models(const std::vector<std::pair<std::string, std::filesystem::path>>& models,
                         const ModelSetOptions& options) {
  if (models.empty()) throw_error(ErrorKind::invalid_argument, "no model to serve");
  register_builtin_families();
  FamilyOptions fo{.backend = options.backend, .text_cache = options.text_cache, .lora = options.lora};
  LoadedModels out;
  for (const auto& [name, dir] : models) {
    for (const auto& [n, f] : out.models)
      if (n == name) throw_error(ErrorKind::invalid_argument, "model '" + name + "' is given twice");
    fo.model_name = name;
    out.models.emplace_back(name, load_family(dir, fo));
  }
  return out;
}

ModelSet::ModelSet(std::vector<std::pair<std::string, std::filesystem::path>> models, Executor& executor, DevicePool& devices,
                   ModelSetOptions options)
    : ModelSet(load_models(models, options), executor, devices, options) {}  // a copy: argument order is unspecified

ModelSet::ModelSet(LoadedModels models, Executor& executor, DevicePool& devices, ModelSetOptions options)
    : state_(std::make_shared<State>()) {
  if (models.models.empty()) throw_error(ErrorKind::invalid_argument, "no model to serve");
  state_->models = std::move(models.models);
  for (const auto& [name, family] : state_->models)
    if (auto preview = LatentPreview::of_package(family->package()); preview && options.preview_every > 0)
      state_->previews.emplace(family.get(), std::move(preview));
  state_->executor = &executor;
  BatcherOptions bo{.batching = options.batching,
                    .executor = &executor,
                    .devices = &devices,
                    .metrics = options.metrics,
                    .tracer = options.tracer,
                    .before_denoise = options.before_denoise,
                    .on_capped = options.on_batch_capped,
                    .on_model_call = options.on_model_call};
  if (options.checkpoints.enabled()) {
    // One thread: checkpoint writes (and removals) of a key happen in the order they were made.
    if (!executor.has_pool("checkpoint"))
      executor.add_pool(WorkerPool::Options{.name = "checkpoint", .threads = 1, .spin = std::chrono::microseconds(0)});
    state_->checkpoints = std::make_unique<Checkpoints>(options.checkpoints, executor.pool("checkpoint"), options.metrics,
                                                        options.on_checkpoint);
    bo.after_step = [c = state_->checkpoints.get()](const std::vector<Job*>& jobs, const std::vector<FamilyJob*>& work,
                                                    const Scheduler& scheduler) { c->after_step(jobs, work, scheduler); };
  }
  state_->batcher = std::make_shared<Batcher>(std::move(bo));
  state_->devices = &devices;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const auto& d = devices.device(i);
    if (d.kind != DeviceKind::cuda) continue;
    const auto c = cuda_capability(parse_torch_device(d.id).index());
    if (c >= 0 && (state_->cuda_capability < 0 || c < state_->cuda_capability)) state_->cuda_capability = c;
  }
  bool any_cuda = false;
  for (std::size_t i = 0; i < devices.size(); ++i) any_cuda |= devices.device(i).kind == DeviceKind::cuda;
  state_->bf16_emulated = devices_emulate_bf16(any_cuda, state_->cuda_capability,
                                               options.cpu_bf16_native.value_or(cpu_computes_bf16_natively()));
  register_libav_post();
  register_rrdb_upscaler();
  register_rife_interpolator();
  state_->base_frames = std::make_unique<BaseFrames>(options.base_frames);
  state_->kept_latents = std::make_unique<KeptLatents>(KeptLatentsOptions{.out_dir = options.out_dir, .metrics = options.metrics},
                                                       executor);
  state_->interpolator = make_post_processor(PostKind::interpolate, options.post);
  state_->upscaler = make_post_processor(PostKind::upscale, options.post);
  if (!executor.has_pool("post"))
    executor.add_pool(WorkerPool::Options{.name = "post", .threads = std::max<std::size_t>(options.post_threads, 1),
                                          .spin = std::chrono::microseconds(0)});
  state_->options = std::move(options);
}

ModelSet::~ModelSet() = default;

std::vector<std::string> ModelSet::model_names() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : state_->models) out.push_back(n);
  return out;
}

bool ModelSet::previews(const std::string& name) const { return state_->previews.count(state_->family(name).get()) > 0; }

const ModelPackage& ModelSet::package(const std::string& name) const { return state_->family(name)->package(); }

JobSpec ModelSet::validate(const json::value& spec) const {
  const auto& family = state_->family(model_field(spec));
  auto parsed = family->validate(spec);
  // A package's bf16 default, on devices that would emulate bf16 (a CPU without it, a CUDA device
  // before 8.0): the package's own float weights
  // (ModelSetOptions::cpu_bf16_native); a job that names bf16 gets it.
  const auto* object = spec.if_object();
  const auto& own = family->package().dtype;
  const auto& carried = family->package().limits.precisions;
  if (state_->bf16_emulated && parsed.precision == "bfloat16" && !(object && object->contains("precision")) && own != "bfloat16" &&
      std::find(carried.begin(), carried.end(), own) != carried.end())
    parsed.precision = own;
  check_post_job(parsed, state_->options.post);
  check_precision_on_device(parsed.precision, state_->cuda_capability);
  if (parsed.interpolate > 1)
    if (const auto why = state_->interpolator->unavailable(); !why.empty()) throw_error(ErrorKind::invalid_argument, "interpolate: " + why);
  if (parsed.upscale > 1)
    if (const auto why = state_->upscaler->unavailable(); !why.empty()) throw_error(ErrorKind::invalid_argument, "upscale: " + why);
  return parsed;
}

// An extend job's kept latents, resolved at admission, whatever the spec said, so the content key
// names the latents that make the job's bytes (stages/exec/kept_latents.hpp); none: the field
// stays absent and the key is what it was before kept latents existed.
static void admit_kept_latents(const ModelSet::State& st, json::value& spec, JobSpec& parsed) {
  auto* object = spec.if_object();
  if (!object || !parsed.extend) return;
  object->erase("video_latents_sha256");
  parsed.video_latents_sha256.clear();
  const auto& package = st.family(parsed.model)->package();
  if (package.limits.extend_overlap <= 0) return;
  parsed.video_latents_sha256 = st.kept_latents->resolve(parsed, package.id());
  if (!parsed.video_latents_sha256.empty()) (*object)["video_latents_sha256"] = parsed.video_latents_sha256;
}

JobSpec ModelSet::admit(json::value& spec) const {
  auto parsed = validate(spec);
  admit_images(spec, parsed, state_->options.images);
  admit_video(spec, parsed, state_->options.videos);
  admit_reference_images(spec, parsed, state_->options.images);
  // An extend job plays at its video's frame rate unless it names one: the joined clip is one
  // stream, and the video's frames would otherwise run faster or slower than they were made.
  std::int64_t clip_frames = 0;
  if (parsed.extend) {
    const auto header = read_video_header(parsed.video, "video", state_->options.videos);
    clip_frames = header.frames;
    if (auto* object = spec.if_object(); object && !object->contains("fps") && header.fps > 0.0) {
      (*object)["fps"] = header.fps;
      parsed = validate(spec);  // the fps's range and interpolate x fps, naming "fps"
    }
  }
  admit_kept_latents(*state_, spec, parsed);
  set_output_shape(parsed, clip_frames, join_overlap(*state_->family(model_field(spec))));
  return parsed;
}

void ModelSet::drop_checkpoint(const std::string& key_hex) const {
  if (state_->checkpoints) state_->checkpoints->drop(key_hex);
}

std::uint64_t ModelSet::checkpoint_bytes() const { return state_->checkpoints ? state_->checkpoints->disk_bytes() : 0; }

std::string ModelSet::model_id(const JobSpec& spec) const { return state_->content_model_id(spec); }

std::vector<StageSpec> ModelSet::stages() const {
  auto st = state_;
  auto bind = [st](asio::awaitable<void> (*fn)(State&, Job&)) { return StageFn([st, fn](Job& job) { return fn(*st, job); }); };
  const auto& o = st->options;
  // Each job in a forming or running group holds a worker, and every lease may run a group:
  // at least max_batch x leases workers, or a second lease idles while the first group's jobs
  // hold all the workers.
  const auto slots = std::max<std::size_t>({o.batching.max_batch, o.max_batch_limit, 1}) * std::max<std::size_t>(o.leases, 1);
  const auto defaults = default_stage_options();
  auto stage = [&](std::string name, std::size_t min_workers, auto fn) {
    const auto it = o.stages.find(name);
    const auto& s = it != o.stages.end() ? it->second : defaults.at(name);
    return StageSpec{name, std::max(s.workers, min_workers), s.queue, bind(fn)};
  };
  // A post-stage runs only for the jobs that ask for it; the others go from decode past it.
  auto post = [&](PostKind kind, auto fn, int JobSpec::*factor) {
    auto spec = stage(std::string(to_string(kind)), 1, fn);
    spec.applies = [factor](const Job& job) {
      const auto* w = find_family_job(job);
      return w && w->spec.*factor > 1;
    };
    return spec;
  };
  // A job that took a kept base render (preprocess) passes denoise and decode.
  auto base = [&](std::string name, auto fn) {
    auto spec = stage(std::move(name), slots, fn);
    spec.applies = renders_base;
    return spec;
  };
  return {
      stage("preprocess", slots, preprocess),
      base(std::string(kDenoise), denoise),
      base("decode", decode),
      post(PostKind::interpolate, interpolate, &JobSpec::interpolate),
      post(PostKind::upscale, upscale, &JobSpec::upscale),
      stage("encode", 1, encode),
  };
}

void ModelSet::set_waiting_probe(std::function<std::size_t(int)> probe) const {
  state_->batcher->set_waiting_probe(std::move(probe));
}

void ModelSet::preempt_for(const Pipeline& pipeline) const {
  set_waiting_probe([p = &pipeline](int priority) { return p->waiting_above(kDenoise, priority); });
}

void ModelSet::set_max_batch(std::size_t max_batch) const {
  const auto limit = std::max(state_->options.batching.max_batch, state_->options.max_batch_limit);
  state_->batcher->set_max_batch(std::min(max_batch, std::max<std::size_t>(limit, 1)));
}

void ModelSet::warm_up(const std::string& device) const {
  for (const auto& [n, f] : state_->models) f->warm_up(device);
}

RenderOutput ModelSet::result(const Job& job) const {
  const auto* w = find_family_job(job);
  if (!w) throw_error(ErrorKind::internal, "job " + job.id() + " has no render result");
  return {w->spec, w->output, w->text_cache_hit, w->device};
}

int ModelSet::resumed_from(const Job& job) const {
  const auto* w = find_family_job(job);
  return w ? w->state.resumed_from : 0;
}

namespace {

// One cache's stats summed over the models (`of` reads them from a family).
template <class Of>
CacheStats summed_stats(const ModelSet::State& st, Of of) {
  CacheStats sum;
  for (const auto& [n, f] : st.models) {
    const auto s = of(*f);
    sum.hits += s.hits;
    sum.misses += s.misses;
    sum.insertions += s.insertions;
    sum.evictions += s.evictions;
    sum.expirations += s.expirations;
    sum.entries += s.entries;
    sum.cost += s.cost;
  }
  return sum;
}

}  // namespace

CacheStats ModelSet::text_cache_stats() const { return summed_stats(*state_, [](const Family& f) { return f.text_cache_stats(); }); }

CacheStats ModelSet::base_frames_stats() const { return state_->base_frames->stats(); }

CacheStats ModelSet::lora_cache_stats() const { return summed_stats(*state_, [](const Family& f) { return f.lora_cache_stats(); }); }

std::map<std::size_t, std::uint64_t> ModelSet::group_sizes(std::string_view stage) const {
  for (auto k : {BatchKind::preprocess, BatchKind::denoise, BatchKind::decode})
    if (to_string(k) == stage) return state_->batcher->group_sizes(k);
  throw_error(ErrorKind::invalid_argument, "group_sizes: unknown stage '" + std::string(stage) + "'");
}

std::vector<std::pair<std::string, std::size_t>> ModelSet::group_log() const { return state_->batcher->group_log(); }

}  // namespace vgen
