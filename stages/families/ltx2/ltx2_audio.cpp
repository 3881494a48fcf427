#include "stages/families/ltx2/ltx2_audio.hpp"

#include "runtime/errors.hpp"
#include "stages/model/model_backend.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <cmath>
#include <cstring>
#include <optional>

namespace vgen {
namespace {

[[noreturn]] void bad(const ModelPackage& p, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, "model package " + p.dir.string() + ": " + what);
}

int int_field(const ModelPackage& p, const boost::json::object& audio, const char* key, int lo, int hi,
              std::optional<int> fallback = std::nullopt) {
  const auto* v = audio.if_contains(key);
  if (v == nullptr && fallback) return *fallback;
  if (v == nullptr || !v->is_int64()) bad(p, std::string("audio.") + key + " must be an integer");
  const auto n = v->as_int64();
  if (n < lo || n > hi)
    bad(p, std::string("audio.") + key + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
               std::to_string(n));
  return static_cast<int>(n);
}

std::vector<float> floats(const ModelPackage& p, const boost::json::object& audio, const char* key, std::size_t n) {
  const auto* v = audio.if_contains(key);
  if (v == nullptr || !v->is_array() || v->as_array().size() != n)
    bad(p, std::string("audio.") + key + " must be an array of " + std::to_string(n) +
               " numbers (latent_channels * latent_mel_bins)");
  std::vector<float> out;
  for (const auto& x : v->as_array()) {
    if (!x.is_number()) bad(p, std::string("audio.") + key + " holds something that is not a number");
    out.push_back(static_cast<float>(x.to_number<double>()));
  }
  return out;
}

}  // namespace

Ltx2AudioConfig Ltx2AudioConfig::of(const ModelPackage& p) {
  const auto* section = p.manifest.if_contains("audio");
  if (section == nullptr || !section->is_object()) bad(p, "no \"audio\" object: this package makes no sound");
  const auto& a = section->as_object();
  Ltx2AudioConfig c;
  c.sample_rate = int_field(p, a, "sample_rate", 1000, 384000);
  c.channels = int_field(p, a, "channels", 1, 2);
  c.latent_channels = int_field(p, a, "latent_channels", 1, 4096);
  c.latent_mel_bins = int_field(p, a, "latent_mel_bins", 1, 4096);
  c.mel_bins = int_field(p, a, "mel_bins", 1, 16384);
  c.vae_sample_rate = int_field(p, a, "vae_sample_rate", 1000, 384000, 16000);
  c.mel_hop_length = int_field(p, a, "mel_hop_length", 1, 65536, 160);
  c.temporal_compression = int_field(p, a, "temporal_compression", 1, 64, 4);
  const auto features = static_cast<std::size_t>(c.latent_channels) * c.latent_mel_bins;
  c.latents_mean = floats(p, a, "latents_mean", features);
  c.latents_std = floats(p, a, "latents_std", features);
  return c;
}

int Ltx2AudioConfig::latent_frames(int frames, double fps) const {
  // Python's round() (half to even) on the same double expression as LTX2Pipeline.__call__.
  const double per_second = static_cast<double>(vae_sample_rate) / mel_hop_length / static_cast<double>(temporal_compression);
  return static_cast<int>(std::nearbyint(frames / fps * per_second));
}

Ltx2AudioDecoder::Ltx2AudioDecoder(ModelPackage package, Ltx2AudioConfig config, std::string backend)
    : package_(std::move(package)), config_(std::move(config)), backend_(std::move(backend)) {}

std::shared_ptr<Ltx2AudioDecoder> Ltx2AudioDecoder::load(const ModelPackage& package, std::string backend) {
  auto config = Ltx2AudioConfig::of(package);
  for (const char* name : {"audio_vae", "vocoder"})
    if (package.components.count(name) == 0) bad(package, std::string("no \"") + name + "\" component for its sound");
  return std::shared_ptr<Ltx2AudioDecoder>(new Ltx2AudioDecoder(package, std::move(config), std::move(backend)));
}

std::vector<AudioTrack> Ltx2AudioDecoder::decode(const at::Tensor& latents, const std::string& device) const {
  const auto features = static_cast<std::int64_t>(config_.latent_channels) * config_.latent_mel_bins;
  if (latents.dim() != 3 || latents.size(2) != features || latents.size(0) < 1 || latents.size(1) < 1)
    throw_error(ErrorKind::invalid_argument, "ltx2 audio latents must be [B, L, " + std::to_string(features) +
                                                 "], got " + std::to_string(latents.dim()) + " dims");
  auto& cache = ModuleCache::instance();
  const auto vae = cache.get_component(package_, "audio_vae", device, backend_);
  const auto vocoder = cache.get_component(package_, "vocoder", device, backend_);

  // Denormalise in float32 as diffusers does (its loop keeps audio latents in float32), then
  // unpack [B, L, C*M] -> [B, C, L, M] and cast to the decoder's dtype.
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const auto mean = at::from_blob(const_cast<float*>(config_.latents_mean.data()), {features}, opts);
  const auto std_ = at::from_blob(const_cast<float*>(config_.latents_std.data()), {features}, opts);
  auto z = latents.to(at::kCPU, at::kFloat) * std_ + mean;
  z = z.unflatten(2, {config_.latent_channels, config_.latent_mel_bins}).transpose(1, 2).contiguous();
  const auto mel = vae->forward({z.to(vae->dtype())});
  const auto wave = vocoder->forward({mel.to(vocoder->dtype())}).to(at::kCPU, at::kFloat);  // [B, ch, S]
  if (wave.dim() != 3 || wave.size(1) != config_.channels)
    throw_error(ErrorKind::internal, "ltx2 vocoder returned a waveform of " + std::to_string(wave.dim()) +
                                         " dims, not [B, " + std::to_string(config_.channels) + ", samples]");
  std::vector<AudioTrack> tracks;
  for (std::int64_t b = 0; b < wave.size(0); ++b) {
    const auto interleaved = wave[b].transpose(0, 1).contiguous();  // [S, ch]
    AudioTrack t{.sample_rate = config_.sample_rate, .channels = config_.channels, .samples = {}};
    t.samples.resize(static_cast<std::size_t>(interleaved.numel()));
    std::memcpy(t.samples.data(), interleaved.data_ptr<float>(), t.samples.size() * sizeof(float));
    tracks.push_back(std::move(t));
  }
  return tracks;
}

}  // namespace vgen
