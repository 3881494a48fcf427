#include "stages/exec/base_frames.hpp"

#include "stages/media/audio_track.hpp"

namespace vgen {

std::size_t BaseClip::bytes() const {
  std::size_t n = frames ? frames->rgb.size() : 0;
  if (audio) n += audio->samples.size() * sizeof(float);
  return n;
}

ContentKey base_content_key(const std::string& model_id, const JobSpec& spec) {
  JobSpec base = spec;
  base.interpolate = 1;  // to_json leaves both out when off: the key of the job without them
  base.upscale = 1;
  return job_content_key(model_id, base);
}

BaseFrames::BaseFrames(BaseFramesOptions options)
    : options_(options),
      enabled_(options.enabled()),
      cache_(TtlCacheOptions{.max_entries = enabled_ ? options.max_entries : 0,
                             .max_cost = options.max_bytes,
                             .default_ttl = options.ttl}) {}

std::optional<BaseClip> BaseFrames::get(const ContentKey& key) {
  if (!enabled_) return std::nullopt;
  return cache_.get(key);
}

bool BaseFrames::put(const ContentKey& key, BaseClip clip) {
  const auto bytes = clip.bytes();
  if (!enabled_ || !clip.frames || bytes > options_.max_bytes) return false;
  cache_.put(key, std::move(clip), bytes);
  return true;
}

}  // namespace vgen
