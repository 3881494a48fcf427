// AudioTrack: a job's sound, handed from the decode stage (a family with sound, e.g. LTX-2) to
// the encode stage, which muxes it beside the video (stages/media/encode.hpp).
//
// Layout: float32 PCM in [-1, 1], interleaved by channel: sample s of channel c is
// samples[s * channels + c]. Sample 0 plays with frame 0; the track's duration is
// frames() / sample_rate seconds.
//
// Ownership: an AudioTrack owns its samples (a plain value type; copy it or move it); a job
// shares it read-only (std::shared_ptr<const AudioTrack>).
// Thread-safety: none of its own; concurrent reads of one object are fine.
// Nothing here blocks or can be cancelled.
#pragma once

#include <cstddef>
#include <vector>

namespace vgen {

struct AudioTrack {
  int sample_rate = 0;  // samples per second per channel
  int channels = 0;     // 1 (mono) or 2 (stereo)
  std::vector<float> samples;

  // Samples per channel.
  std::size_t frames() const { return channels > 0 ? samples.size() / static_cast<std::size_t>(channels) : 0; }
  double seconds() const { return sample_rate > 0 ? static_cast<double>(frames()) / sample_rate : 0.0; }
};

}  // namespace vgen
