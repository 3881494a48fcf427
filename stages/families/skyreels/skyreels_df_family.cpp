#include "stages/families/skyreels/skyreels_df_family.hpp"

#include "runtime/errors.hpp"
#include "stages/media/clip_extension.hpp"
#include "stages/model/cuda_graph_calls.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <algorithm>
#include <limits>

namespace vgen {

namespace json = boost::json;

namespace {

const WanJob& wan(const FamilyJob& job) { return static_cast<const WanJob&>(job); }

// The job's prefix, undefined for text-to-video (and for warm-up's plain WanJob).
const at::Tensor* prefix_of(const FamilyJob& job) {
  const auto* s = dynamic_cast<const SkyReelsJob*>(&job);
  return s && s->prefix.defined() ? &s->prefix : nullptr;
}

const json::object* section(const ModelPackage& p, const char* name) {
  const auto* v = p.manifest.if_contains(name);
  return v && v->is_object() ? &v->get_object() : nullptr;
}

}  // namespace

SkyReelsDFFamily::SkyReelsDFFamily(ModelPackage package, const FamilyOptions& options) : WanFamily(std::move(package), options) {
  const auto& p = this->package();
  const auto where = "model package " + p.dir.string() + ": manifest field 'diffusion_forcing.";
  if (const auto* df = section(p, "diffusion_forcing")) {
    auto integer = [&](const char* key, int absent) {
      const auto* v = df->if_contains(key);
      if (!v) return absent;
      if (!v->is_int64()) throw Error(ErrorKind::invalid_argument, where + key + "' must be an integer");
      return static_cast<int>(v->get_int64());
    };
    // The asynchronous schedule (frames at different steps) needs a scheduler per frame: not built.
    if (integer("ar_step", 0) != 0) throw Error(ErrorKind::invalid_argument, where + "ar_step' must be 0 (synchronous)");
    if (integer("causal_block_size", 1) != 1) throw Error(ErrorKind::invalid_argument, where + "causal_block_size' must be 1");
  }
  // The overlap is the package's extension.overlap_frames (stages/model/model_package.cpp checks
  // it is 4k+1 and that the package takes a video).
  overlap_ = p.limits.extend_overlap;
  if (p.limits.video != InputUse::none && (overlap_ < 1 || (overlap_ - 1) % p.temporal_scale != 0))
    throw Error(ErrorKind::invalid_argument, "model package " + p.dir.string() + ": manifest field 'extension.overlap_frames' must be " +
                                                 std::to_string(p.temporal_scale) + "k+1 for " + p.family);
  if (const auto* t = section(p, "transformer"))
    if (const auto* f = t->if_contains("fps_embedding"); f && f->is_bool()) fps_embedding_ = f->get_bool();
  if (p.limits.video != InputUse::none) p.component("vae_encoder");
}

std::shared_ptr<Family> make_skyreels_df_family(ModelPackage package, const FamilyOptions& options) {
  return std::make_shared<SkyReelsDFFamily>(std::move(package), options);
}

int SkyReelsDFFamily::prefix_latent_frames() const { return (overlap_ - 1) / package().temporal_scale + 1; }

JobSpec SkyReelsDFFamily::validate(const json::value& spec) const {
  auto s = WanFamily::validate(spec);
  if (!s.loras.empty()) throw Error(ErrorKind::invalid_argument, "loras: not supported by the " + package().family + " package yet");
  // to_json writes the default strength back for any job with a video: only another value is
  // a request for one (as Wan VACE refuses it).
  if (s.strength != package().defaults.strength)
    throw Error(ErrorKind::invalid_argument, "strength: a " + package().family +
                                                 " package extends its video from the last frames' latents; it does not restyle it");
  // A plain video (no "extend") is extended too: the same checks as an extend job's.
  if (!s.video.empty() && s.frames < overlap_ + package().limits.frames_step)
    throw Error(ErrorKind::invalid_argument, "frames: extending a video makes a segment that starts with its last " +
                                                 std::to_string(overlap_) + " frames; needs at least " +
                                                 std::to_string(overlap_ + package().limits.frames_step) + " (got " +
                                                 std::to_string(s.frames) + ")");
  return s;
}

std::shared_ptr<FamilyJob> SkyReelsDFFamily::create_job(JobSpec spec) const {
  auto j = std::make_shared<SkyReelsJob>();
  j->spec = std::move(spec);
  return j;
}

at::Tensor skyreels_overlap_frames(const WanJob& job, int count) {
  at::Tensor frames;
  if (job.video.defined()) {
    frames = job.video.to(at::kFloat);
    if (frames.dim() != 4 || frames.size(1) != 3 || frames.size(2) != job.spec.height || frames.size(3) != job.spec.width)
      throw Error(ErrorKind::invalid_argument, "video: must be [F, 3, " + std::to_string(job.spec.height) + ", " +
                                                   std::to_string(job.spec.width) + "] frames at the job's size");
  } else {
    if (job.spec.video.empty()) throw Error(ErrorKind::invalid_argument, "video: this job has no input video");
    // Admission held the file to the operator's limits already (as wan_job_video does).
    ClipSource source{.file = job.spec.video, .sha256 = job.spec.video_sha256, .width = job.spec.width, .height = job.spec.height};
    source.limits.max_bytes = std::numeric_limits<std::uint64_t>::max();
    source.limits.max_frames = std::numeric_limits<int>::max();
    source.limits.max_seconds = std::numeric_limits<double>::max();
    source.limits.max_pixels = std::numeric_limits<int>::max();  // libav takes an int
    source.limits.max_side = std::numeric_limits<int>::max();
    auto clip = read_fitted_clip(source, "video");
    const int first = std::max(0, clip.count - count);
    auto rgb = at::from_blob(clip.frame(first), {clip.count - first, clip.height, clip.width, 3}, at::kByte);
    frames = rgb.permute({0, 3, 1, 2}).to(at::kFloat).div(255.0).contiguous();  // copies out of clip
  }
  if (frames.size(0) < count)
    throw Error(ErrorKind::invalid_argument, "video: has " + std::to_string(frames.size(0)) + " frames; extending needs at least " +
                                                 std::to_string(count) + " (overlap_history)");
  return frames.narrow(0, frames.size(0) - count, count).contiguous();
}

// Extension: the prefix (encoded here unless given) becomes the first latent frames of the
// noise, as diffusers writes it into its latents before the loop.
void SkyReelsDFFamily::condition(const std::string& device, WanJob& job) {
  auto* s = dynamic_cast<SkyReelsJob*>(&job);
  if (!s || (!s->prefix.defined() && job.spec.video.empty() && !job.video.defined())) return;
  const auto& p = package();
  const auto& lat = job.state.latents;
  // A finished job's own latents (the video is its output): their last P' frames, when they are
  // of this job's latent size; else the frames are encoded as any video's.
  const auto& given = job.video_latents;
  if (!s->prefix.defined() && given.defined() && given.dim() == 5 && given.size(1) == lat.size(1) &&
      given.size(2) >= prefix_latent_frames() && given.size(3) == lat.size(3) && given.size(4) == lat.size(4))
    s->prefix = given.narrow(2, given.size(2) - prefix_latent_frames(), prefix_latent_frames());
  if (s->prefix.defined()) {
    s->prefix_reused = true;
    reused_.fetch_add(1);
  } else {
    // [P, 3, H, W] in [0, 1] -> [1, 3, P, H, W] in [-1, 1], as preprocess_video normalises.
    auto x = (skyreels_overlap_frames(job, overlap_).permute({1, 0, 2, 3}).unsqueeze(0) * 2 - 1).contiguous();
    auto vae = module("vae_encoder", device);
    s->prefix = wan_normalised_latents(p, vae->forward({x.to(vae->dtype())}).to(at::kCPU));
  }
  const auto& latents = lat;
  const auto& prefix = s->prefix;
  if (prefix.dim() != 5 || prefix.size(0) != 1 || prefix.size(1) != latents.size(1) || prefix.size(2) != prefix_latent_frames() ||
      prefix.size(3) != latents.size(3) || prefix.size(4) != latents.size(4) || prefix.size(2) >= latents.size(2))
    throw Error(ErrorKind::invalid_argument, "video: its overlap latents do not fit the job's " + std::to_string(job.spec.width) +
                                                 "x" + std::to_string(job.spec.height) + ", " + std::to_string(job.spec.frames) + " frames");
  s->prefix = prefix.to(at::kFloat).contiguous();
  if (job.state.step == 0) {
    auto noise = latents.clone();
    noise.narrow(2, 0, prefix.size(2)).copy_(s->prefix);
    job.state.latents = noise;
  }
}

std::unique_ptr<Scheduler> SkyReelsDFFamily::make_scheduler(const FamilyJob& job) const {
  auto s = make_wan_scheduler(package(), job.spec.scheduler, job.spec.shift);
  if (s->name() == "UniPCMultistepScheduler") {
    // The same configuration plus the aliasing flag (scheduler_params_of reads the manifest's
    // config; the flag is not a diffusers key, so it is added here rather than exported).
    auto config = package().scheduler_type == "UniPCMultistepScheduler" && (job.spec.scheduler.empty() || job.spec.scheduler == package().scheduler_type)
                      ? package().scheduler_config
                      : json::object{};
    if (!config.empty()) {
      if (job.spec.shift > 0) config["flow_shift"] = job.spec.shift;
      config["vgen_corrector_sees_stepped_sample"] = true;
      s = vgen::make_scheduler("UniPCMultistepScheduler", scheduler_params_of(config));
    }
  }
  s->set_timesteps(job.spec.steps);
  return s;
}

// The prefix frames as given, whatever the scheduler did to them (diffusers never updates them).
at::Tensor SkyReelsDFFamily::denoiser_input(const std::vector<FamilyJob*>& jobs, const at::Tensor& x) const {
  at::Tensor out = x;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const auto* prefix = prefix_of(*jobs[j]);
    if (!prefix) continue;
    if (out.is_same(x)) out = x.clone();
    out[static_cast<std::int64_t>(j)].narrow(1, 0, prefix->size(2)).copy_((*prefix)[0].to(x.scalar_type()));
  }
  return out;
}

// One timestep per latent frame: the row's own, 0 on the clean prefix (the timestep matrix's
// value for a pre-ready frame with addnoise_condition 0).
at::Tensor SkyReelsDFFamily::denoiser_timesteps(const std::vector<FamilyJob*>& jobs, const at::Tensor& x, const at::Tensor& t) const {
  auto out = t.to(at::kFloat).reshape({-1, 1}).repeat({1, x.size(2)});
  for (std::size_t j = 0; j < jobs.size(); ++j)
    if (const auto* prefix = prefix_of(*jobs[j])) out[static_cast<std::int64_t>(j)].narrow(0, 0, prefix->size(2)).zero_();
  return out;
}

// One transformer call for every job's cond and uncond rows (diffusers calls once per prompt;
// the exported module is row-independent), each row with its job's fps flag, then the guidance
// in the transformer's dtype as WanFamily does.
at::Tensor SkyReelsDFFamily::predict(const PredictCall& call) {
  const auto& live = call.jobs;
  const bool cfg = live.front()->spec.guidance > 1.0;
  std::vector<at::Tensor> contexts;
  std::vector<double> flags;
  for (auto* j : live) {
    contexts.push_back(wan(*j).text.context);  // [2 or 1, rows, D]: cond (, uncond)
    flags.push_back(skyreels_fps_flag(j->spec.fps));
  }
  auto x = denoiser_input(live, call.x);
  auto t = denoiser_timesteps(live, call.x, row_timesteps(call));
  auto fps = at::tensor(flags, at::kDouble).to(at::kFloat);
  if (cfg) {
    x = x.repeat_interleave(2, 0);  // job j's rows 2j (cond), 2j+1 (uncond)
    t = t.repeat_interleave(2, 0);
    fps = fps.repeat_interleave(2, 0);
  }
  const auto& name = package().component_for("transformer", live.front()->spec.precision);
  auto transformer = with_cuda_graphs(module(name, call.device), package(), name);  // model_backend.cuda_graphs
  auto context = contexts.size() == 1 ? contexts[0] : at::cat(contexts, 0);
  auto pred = predict_flow(call.device, x, t.contiguous(), context, {}, fps, transformer).to(at::kCPU);
  if (!cfg) return pred;
  auto cond = pred.slice(0, 0, pred.size(0), 2), uncond = pred.slice(0, 1, pred.size(0), 2);
  std::vector<at::Tensor> rows;
  for (std::size_t j = 0; j < live.size(); ++j) {
    const auto r = static_cast<std::int64_t>(j);
    rows.push_back(uncond.narrow(0, r, 1) + live[j]->spec.guidance * (cond.narrow(0, r, 1) - uncond.narrow(0, r, 1)));
  }
  return rows.size() == 1 ? rows[0] : at::cat(rows, 0);
}

// The prefix back into the final latents (the scheduler moved it; diffusers never does), so the
// decoded segment starts with the overlap as diffusers decodes it. Idempotent on a retried decode.
void SkyReelsDFFamily::decode(const std::string& device, const std::vector<FamilyJob*>& jobs) {
  for (auto* j : jobs) {
    const auto* prefix = prefix_of(*j);
    if (!prefix) continue;
    auto latents = j->state.latents.clone();
    latents.narrow(2, 0, prefix->size(2)).copy_(*prefix);
    j->state.latents = latents;
  }
  WanFamily::decode(device, jobs);
}

// The family's manifest name, registered by the build's register_builtin_families()
// (cmake/family.cmake).
void register_skyreels_df_family() { families().add("skyreels-v2-df", &make_skyreels_df_family); }

}  // namespace vgen
