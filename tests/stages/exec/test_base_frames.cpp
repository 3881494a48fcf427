#include "stages/exec/base_frames.hpp"

#include "stages/media/audio_track.hpp"

#include <doctest/doctest.h>

using namespace vgen;

namespace {

std::shared_ptr<const VideoFrames> clip(int width, std::uint8_t fill) {
  auto v = VideoFrames::allocate(width, 16, 4, 16.0);
  std::fill(v.rgb.begin(), v.rgb.end(), fill);
  return std::make_shared<const VideoFrames>(std::move(v));
}

JobSpec spec(int interpolate, int upscale, std::uint64_t seed = 1) {
  JobSpec s;
  s.prompt = "a cat";
  s.seed = seed;
  s.interpolate = interpolate;
  s.upscale = upscale;
  return s;
}

}  // namespace

TEST_CASE("the base key is the job's key without its post-stages, and only that") {
  const auto plain = job_content_key("m", spec(1, 1));
  CHECK(base_content_key("m", spec(1, 1)) == plain);
  CHECK(base_content_key("m", spec(2, 1)) == plain);
  CHECK(base_content_key("m", spec(4, 2)) == plain);
  CHECK(job_content_key("m", spec(4, 2)) != plain);  // the result cache still tells them apart
  CHECK(base_content_key("m", spec(2, 2, 7)) != plain);  // another seed is another base
  CHECK(base_content_key("other", spec(2, 2)) != plain);  // another model too
}

TEST_CASE("off by default: nothing is kept") {
  BaseFrames off{BaseFramesOptions{}};
  CHECK_FALSE(off.enabled());
  CHECK_FALSE(off.put(base_content_key("m", spec(1, 1)), BaseClip{clip(16, 1), nullptr}));
  CHECK_FALSE(off.get(base_content_key("m", spec(1, 1))));
  CHECK_FALSE(BaseFrames{BaseFramesOptions{.max_bytes = 1 << 20, .ttl = std::chrono::seconds(0)}}.enabled());
}

TEST_CASE("a kept clip comes back shared; the byte budget evicts the least recently used") {
  const auto one = clip(16, 1);  // 16 x 16 x 3 x 4 = 3072 bytes
  BaseFrames cache{BaseFramesOptions{.max_bytes = 2 * one->rgb.size() + 100}};
  REQUIRE(cache.enabled());
  const auto a = base_content_key("m", spec(1, 1, 1)), b = base_content_key("m", spec(1, 1, 2)),
             c = base_content_key("m", spec(1, 1, 3));
  auto audio = std::make_shared<AudioTrack>();
  audio->sample_rate = 8000;
  audio->channels = 1;
  audio->samples.assign(25, 0.5f);  // 100 bytes
  CHECK(cache.put(a, BaseClip{one, audio}));
  CHECK(cache.put(b, BaseClip{clip(16, 2), nullptr}));
  CHECK(cache.stats().cost == 2 * one->rgb.size() + 100);
  const auto hit = cache.get(a);  // a is now the most recently used
  REQUIRE(hit);
  CHECK(hit->frames == one);  // the same clip, not a copy
  CHECK(hit->audio == audio);
  CHECK(cache.put(c, BaseClip{clip(16, 3), nullptr}));  // over the budget: b goes
  CHECK_FALSE(cache.get(b));
  CHECK(cache.get(a));
  CHECK(cache.get(c));
  CHECK(cache.stats().evictions == 1);
  CHECK(one.use_count() >= 2);  // a job holding an evicted clip keeps it alive
}

TEST_CASE("a clip over the whole budget is not kept and evicts nothing") {
  BaseFrames cache{BaseFramesOptions{.max_bytes = 4000}};
  const auto a = base_content_key("m", spec(1, 1, 1));
  CHECK(cache.put(a, BaseClip{clip(16, 1), nullptr}));
  CHECK_FALSE(cache.put(base_content_key("m", spec(1, 1, 2)), BaseClip{clip(64, 1), nullptr}));
  CHECK(cache.get(a));
  CHECK(cache.stats().evictions == 0);
}
