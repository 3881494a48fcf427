// BaseFrames: the decoded clips of finished base renders, kept so that a job which differs from
// one of them only in its post-stage settings (JobSpec::interpolate, JobSpec::upscale) skips
// preprocess, denoise and decode and goes straight to its post-stages (issue 35, item 4).
//
// The key is base_content_key: the job's content key with interpolate and upscale off, so a
// job without post-stages and every post variant of it share one entry. ModelSet puts a job's
// clip after its decode succeeded (a job cancelled or failed before that puts nothing, so a
// failed base is never served) and looks it up in preprocess.
//
// Trade-off: the entry is the decoded clip in bytes (VideoFrames, 8-bit RGB), not the final
// latents. Bytes cost far more memory (a 480p, 81-frame clip is ~97 MB; its latents ~8 MB) but
// a hit then repeats no decode either (the VAE decode is a large share of a small job's time),
// and the bytes are exactly what the post-stages and encode read on the cold path, so a hit's
// output is the cold render's, byte for byte. The budget (max_bytes) and ttl bound the memory;
// least-recently-used clips go first. A clip over the whole budget is not kept.
//
// Ownership: entries are shared_ptr<const>; a job served from one keeps its clip alive after
// an eviction. Thread-safety: every member may be called from any thread (TtlCache's mutex).
// Nothing blocks or waits, so there is nothing to cancel.
#pragma once

#include "runtime/content_key.hpp"
#include "runtime/ttl_cache.hpp"
#include "stages/job_spec.hpp"
#include "stages/media/frames.hpp"

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace vgen {

struct AudioTrack;  // stages/media/audio_track.hpp

// Config keys cache.base_frames.mb and cache.base_frames.ttl_s (api/config). max_bytes 0: off.
struct BaseFramesOptions {
  std::size_t max_bytes = 0;
  std::chrono::seconds ttl{3600};
  std::size_t max_entries = 256;
  bool enabled() const noexcept { return max_bytes > 0 && max_entries > 0 && ttl.count() > 0; }
};

// A finished base render: the decoded frames and, for a family with sound, its track.
struct BaseClip {
  std::shared_ptr<const VideoFrames> frames;
  std::shared_ptr<const AudioTrack> audio;  // null for a silent family
  std::size_t bytes() const;
};

// The content key of the job's base render: job_content_key with the post-stages off.
ContentKey base_content_key(const std::string& model_id, const JobSpec& spec);

class BaseFrames {
 public:
  explicit BaseFrames(BaseFramesOptions options);

  bool enabled() const noexcept { return enabled_; }
  std::optional<BaseClip> get(const ContentKey& key);
  // Keeps `clip` under `key` (evicting the least recently used past the budget); false when off
  // or when the clip alone is over the budget (then nothing is kept and nothing evicted).
  bool put(const ContentKey& key, BaseClip clip);
  CacheStats stats() const { return cache_.stats(); }

 private:
  const BaseFramesOptions options_;
  const bool enabled_;
  TtlCache<BaseClip> cache_;
};

}  // namespace vgen
