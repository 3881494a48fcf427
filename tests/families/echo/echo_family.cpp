// "test-echo": a model family with no model files, for the family seam test. Its denoiser
// pulls the latents toward zero and its decoder shows them as grey levels, so a job's frames
// depend only on its seed. It implements the whole Family interface (stages/families/family.hpp)
// in this folder; the build declares it (CMakeLists.txt) and register_echo_family() names it.
//
// TEST ONLY, sound: a package whose manifest has "test_tone": {"hz": 440, "sample_rate": 16000,
// "channels": 1} makes every job's decode emit that sine (amplitude 0.5, phase 0 at sample 0,
// the same on every channel) for exactly the clip's duration, round(frames / fps * sample_rate)
// samples, so the audio plumbing (encode, probe, the rerun rule, batch, serve) is tested end to
// end without a model. No real family makes a tone; this is not a feature of vgen.
#include "stages/families/family.hpp"

#include "runtime/errors.hpp"
#include "stages/media/audio_track.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <numbers>
#include <optional>

namespace vgen {
namespace {

struct Tone {
  double hz = 440;
  int sample_rate = 16000, channels = 1;

  // The package's "test_tone" object, if any.
  static std::optional<Tone> of(const ModelPackage& p) {
    const auto* v = p.manifest.if_contains("test_tone");
    if (v == nullptr) return std::nullopt;
    if (!v->is_object()) throw_error(ErrorKind::invalid_argument, "test_tone must be an object");
    const auto& o = v->as_object();
    Tone t;
    if (const auto* x = o.if_contains("hz")) t.hz = x->to_number<double>();
    if (const auto* x = o.if_contains("sample_rate")) t.sample_rate = static_cast<int>(x->to_number<std::int64_t>());
    if (const auto* x = o.if_contains("channels")) t.channels = static_cast<int>(x->to_number<std::int64_t>());
    return t;
  }

  std::shared_ptr<const AudioTrack> track(int frames, double fps) const {
    auto a = std::make_shared<AudioTrack>();
    a->sample_rate = sample_rate;
    a->channels = channels;
    const auto n = static_cast<std::size_t>(std::llround(frames / fps * sample_rate));
    a->samples.resize(n * static_cast<std::size_t>(channels));
    for (std::size_t i = 0; i < n; ++i)
      for (int c = 0; c < channels; ++c)
        a->samples[i * channels + c] = static_cast<float>(0.5 * std::sin(2 * std::numbers::pi * hz * static_cast<double>(i) / sample_rate));
    return a;
  }
};

class EchoFamily final : public Family {
 public:
  explicit EchoFamily(ModelPackage package) : package_(std::move(package)), tone_(Tone::of(package_)) {}

  const ModelPackage& package() const override { return package_; }
  JobSpec validate(const boost::json::value& spec) const override {
    return parse_job_spec(spec, package_.defaults, package_.limits);
  }
  std::shared_ptr<FamilyJob> create_job(JobSpec spec) const override {
    auto job = std::make_shared<FamilyJob>();
    job->spec = std::move(spec);
    return job;
  }
  void prepare(const std::string&, const std::vector<FamilyJob*>& jobs) override {
    for (auto* j : jobs) {  // [1, 1, F', 4, 4] noise from the job's seed
      auto gen = at::make_generator<at::CPUGeneratorImpl>(j->spec.seed);
      j->state.latents = at::randn({1, 1, (j->spec.frames - 1) / 4 + 1, 4, 4}, gen, at::kFloat);
    }
  }
  std::unique_ptr<Scheduler> make_scheduler(const FamilyJob& job) const override {
    auto s = vgen::make_scheduler("FlowMatchEulerDiscreteScheduler", {});
    s->set_timesteps(job.spec.steps);
    return s;
  }
  std::string denoise_key(const FamilyJob& job, const Scheduler& s) const override {
    return key_prefix() + "|" + std::string(s.name()) + "|" + std::to_string(job.spec.steps) + "|" +
           std::to_string(job.state.latents.size(2));
  }
  at::Tensor predict(const PredictCall& call) override { return call.x; }  // velocity = x: toward 0
  void decode(const std::string&, const std::vector<FamilyJob*>& jobs) override {
    for (auto* j : jobs) {  // each latent frame's 4x4 grid, nearest-upsampled, as grey
      const auto z = at::sigmoid(j->state.latents[0][0]);  // [F', 4, 4]
      const int f = j->spec.frames, h = j->spec.height, w = j->spec.width;
      const auto at_f = at::div(at::arange(f, at::kLong), 4, "floor").clamp_max(z.size(0) - 1);
      const auto at_h = at::div(at::arange(h, at::kLong) * 4, h, "floor");
      const auto at_w = at::div(at::arange(w, at::kLong) * 4, w, "floor");
      const auto grey = z.index_select(0, at_f).index_select(1, at_h).index_select(2, at_w);  // [F, H, W]
      j->frames = grey.unsqueeze(-1).expand({f, h, w, 3}).contiguous();
      if (tone_) {
        j->audio_start = std::chrono::steady_clock::now();
        j->audio = tone_->track(f, j->spec.fps);
        j->audio_end = std::chrono::steady_clock::now();
      }
    }
  }
  void warm_up(const std::string&) override {}

 private:
  ModelPackage package_;
  std::optional<Tone> tone_;
};

}  // namespace

void register_echo_family() {
  families().add("test-echo", [](ModelPackage p, const FamilyOptions&) { return std::make_shared<EchoFamily>(std::move(p)); });
}

}  // namespace vgen
