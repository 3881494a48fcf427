// LTX-2's sound: the audio latents a denoising loop ends with, decoded to AudioTracks
// (stages/media/audio_track.hpp) as diffusers 0.42's LTX2Pipeline does after its loop:
//   packed latents [B, L, C*M] (normalised, as LTX2Pipeline.__call__ holds them at the end)
//   -> denormalised with the manifest's audio.latents_mean / latents_std (one per packed feature)
//   -> unpacked to [B, C, L, M] (feature f = channel * M + mel bin)
//   -> component "audio_vae" (AutoencoderKLLTX2Audio.decode): mel [B, 2, T, mel_bins]
//   -> component "vocoder" (LTX2Vocoder or LTX2VocoderWithBWE): waveform [B, channels, samples]
//   -> one interleaved float32 track per batch row, at audio.sample_rate.
// The package's manifest carries both components and the "audio" object that
// tools/vgen_export/ltx2_audio.py's export_ltx2_audio writes (sample_rate, channels,
// latent_channels, latent_mel_bins, mel_bins, vae_sample_rate, mel_hop_length,
// temporal_compression, latents_mean, latents_std).
//
// Ownership: a decoder holds a copy of the package description and borrows its modules from
// the process-wide ModuleCache (stages/model/model_backend.hpp), loaded on first use per device.
// Thread-safety: decode may run on several threads and devices at once (Module::forward is
// re-entrant). Blocking: decode runs both modules on the calling thread (a device's compute
// thread); nothing here is cancellable.
// This header includes LibTorch (ATen): api/ never includes it.
#pragma once

#include "stages/media/audio_track.hpp"
#include "stages/model/model_package.hpp"

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace vgen {

// The manifest's "audio" object.
struct Ltx2AudioConfig {
  int sample_rate = 0;  // of the vocoder's output
  int channels = 0;
  int latent_channels = 0, latent_mel_bins = 0, mel_bins = 0;
  int vae_sample_rate = 16000, mel_hop_length = 160, temporal_compression = 4;
  std::vector<float> latents_mean, latents_std;  // latent_channels * latent_mel_bins each

  // Error(invalid_argument, "<package>: audio.<field> ...") for a missing or malformed object.
  static Ltx2AudioConfig of(const ModelPackage& package);
  // Latent frames for a clip of `frames` at `fps`, as LTX2Pipeline.__call__ counts them:
  // round(frames / fps * vae_sample_rate / mel_hop_length / temporal_compression).
  int latent_frames(int frames, double fps) const;
};

class Ltx2AudioDecoder {
 public:
  // Error(invalid_argument) naming the package when it has no "audio" object or no
  // "audio_vae" / "vocoder" component. `backend` is ModuleCache::get_component's preference.
  static std::shared_ptr<Ltx2AudioDecoder> load(const ModelPackage& package, std::string backend = "auto");

  // latents: [B, L, latent_channels * latent_mel_bins], any float dtype, any device.
  // Returns B tracks of sample_rate and channels. Error(invalid_argument) for another shape.
  std::vector<AudioTrack> decode(const at::Tensor& latents, const std::string& device) const;

  const Ltx2AudioConfig& config() const noexcept { return config_; }

 private:
  Ltx2AudioDecoder(ModelPackage package, Ltx2AudioConfig config, std::string backend);
  ModelPackage package_;
  Ltx2AudioConfig config_;
  std::string backend_;
};

}  // namespace vgen
