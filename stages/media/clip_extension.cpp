#include "stages/media/clip_extension.hpp"

#include "runtime/errors.hpp"

#include <cmath>
#include <cstring>

namespace vgen {

namespace {

RgbImage fitted(RgbImage&& frame, int width, int height) {
  if (frame.width == width && frame.height == height) return std::move(frame);
  return resize_rgb(frame, width, height, ResizeFilter::lanczos);
}

void check_source(const ClipSource& s, std::string_view field) {
  if (s.width < 1 || s.height < 1) throw_error(ErrorKind::internal, "clip_extension: the job's size is not set");
  if (s.sha256.empty()) return;
  // The job was admitted with these bytes; a file replaced since would join another clip.
  if (video_file_sha256(s.file, field, s.limits) != s.sha256)
    throw_error(ErrorKind::invalid_argument, std::string(field) + ": '" + s.file.string() +
                                                 "' no longer holds the video the job was accepted with (video_sha256 differs)");
}

}  // namespace

VideoFrames read_fitted_clip(const ClipSource& source, std::string_view field) {
  check_source(source, field);
  std::vector<RgbImage> frames;
  auto keep = [&](int, RgbImage&& frame) { frames.push_back(fitted(std::move(frame), source.width, source.height)); };
  const auto clip = for_each_video_frame(source.file, field, source.limits, keep);
  const double fps = clip.header.fps > 0.0 && clip.header.fps <= 240.0 ? clip.header.fps : 16.0;
  auto out = VideoFrames::allocate(source.width, source.height, static_cast<int>(frames.size()), fps);
  if (clip.header.fps <= 0.0) out.fps = 0.0;  // unknown: the caller's to choose (allocate needs a valid one)
  for (std::size_t i = 0; i < frames.size(); ++i)
    std::memcpy(out.frame(static_cast<int>(i)), frames[i].rgb.data(), out.frame_bytes());
  return out;
}

RgbImage read_fitted_last_frame(const ClipSource& source, std::string_view field) {
  check_source(source, field);
  RgbImage last;
  auto keep = [&](int, RgbImage&& frame) { last = std::move(frame); };
  for_each_video_frame(source.file, field, source.limits, keep);
  return fitted(std::move(last), source.width, source.height);
}

VideoFrames join_extension(const VideoFrames& clip, const VideoFrames& segment, int overlap) {
  if (overlap < 1 || segment.count <= overlap)
    throw_error(ErrorKind::internal, "join_extension: the segment has " + std::to_string(segment.count) + " frames, overlap " +
                                         std::to_string(overlap));
  if (clip.count < 1) throw_error(ErrorKind::internal, "join_extension: the clip has no frame");
  if (clip.width != segment.width || clip.height != segment.height)
    throw_error(ErrorKind::internal, "join_extension: the clip is " + std::to_string(clip.width) + "x" + std::to_string(clip.height) +
                                         ", the segment " + std::to_string(segment.width) + "x" + std::to_string(segment.height));
  auto out = VideoFrames::allocate(segment.width, segment.height, clip.count + segment.count - overlap, segment.fps);
  const std::size_t clip_bytes = clip.rgb.size();
  std::memcpy(out.rgb.data(), clip.rgb.data(), clip_bytes);
  std::memcpy(out.rgb.data() + clip_bytes, segment.frame(overlap), segment.rgb.size() - overlap * segment.frame_bytes());
  return out;
}

AudioTrack extension_audio(const AudioTrack& segment, int clip_frames, double fps) {
  AudioTrack out{.sample_rate = segment.sample_rate, .channels = segment.channels, .samples = {}};
  if (segment.sample_rate <= 0 || segment.channels <= 0 || clip_frames < 1 || !(fps > 0.0)) return segment;
  const auto lead = static_cast<std::size_t>(std::llround((clip_frames - 1) / fps * segment.sample_rate));
  out.samples.assign(lead * static_cast<std::size_t>(segment.channels), 0.0f);
  out.samples.insert(out.samples.end(), segment.samples.begin(), segment.samples.end());
  return out;
}

}  // namespace vgen
