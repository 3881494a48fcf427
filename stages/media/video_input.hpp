// Video input for video-to-video jobs (issue 34): a file (a CLI path, a batch line's path, or an
// HTTP upload written to <output_dir>/uploads/) read through libavformat/libavcodec (owners in
// stages/media/libav.hpp), checked against VideoLimits and decoded to 8-bit RGB frames.
//
// Every error about the video itself is Error(invalid_argument) whose message starts with the
// job field it came from ("video: ..."), so the CLI exits 2 and HTTP answers 400 naming it:
// a missing or empty file, one over max_bytes, a container that is not a video container
// (text, an image, a playlist: only the demuxers in kVideoContainers are opened, and only the
// "file" protocol, so a file cannot make libav read another file or the network), no video
// stream (audio only), a codec outside kVideoCodecs, a size, frame count or duration over the
// limits, a truncated or corrupt stream (fewer frames than the container promised, a packet
// the decoder refuses, a frame whose size differs from the header's).
//
// Bounds are checked from the container before anything is decoded where the container says
// them (size, duration, frame count), and the decoders are capped as well
// (AVCodecContext::max_pixels, also while libav probes the stream), so a crafted header that
// claims 16384x16384 or 10,000 frames is refused without the memory or time it would cost.
//
// No LibTorch here, so api/ may include it. Thread-safety: pure functions over values and
// files; any number may run at once. Blocking: reads and decodes on the calling thread (up to
// max_frames frames of at most max_pixels: run it on a worker thread). Cancellation: none; a
// call runs to completion, bounded by the limits.
#pragma once

#include "stages/media/image_input.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

struct VideoLimits {
  std::uint64_t max_bytes = 64ull << 20;          // the file or upload
  int max_frames = 1025;                          // decoded frames (Wan's longest clips are 81-257)
  std::int64_t max_pixels = 3840ll * 2160;        // width * height of one frame (4K UHD)
  int max_side = 4096;                            // either dimension
  double max_seconds = 600.0;                     // the container's duration
};

// Containers and codecs a video input may use (libav names).
inline constexpr std::string_view kVideoContainers = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,gif,mpegts,nut";
inline constexpr std::string_view kVideoCodecs[] = {"h264", "hevc", "vp8", "vp9", "av1", "mpeg4", "mpeg2video",
                                                    "mjpeg", "png", "gif", "ffv1", "prores"};

// What the container says, without decoding the frames.
struct VideoHeader {
  std::string container;       // libav's demuxer name ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm")
  std::string codec;           // "h264", "vp9", ...
  int width = 0, height = 0;
  std::int64_t frames = 0;     // the container's frame count; 0 when it does not say
  double seconds = 0.0;        // the container's duration; 0 when it does not say
  double fps = 0.0;            // the stream's average frame rate; 0 when unknown
};

// Opens `file` and checks its container, video stream, codec, size, duration and frame count
// (where known) against `limits`. `field` prefixes every error message.
VideoHeader read_video_header(const std::filesystem::path& file, std::string_view field, const VideoLimits& limits = {});

struct VideoClip {
  VideoHeader header;
  int frames = 0;                // every frame decoded (all are, whatever `keep`)
  std::vector<RgbImage> kept;    // the first min(keep, frames) of them, as RGB
};

// read_video_header, then a full decode: every frame is decoded and checked (count, size,
// corruption); the first `keep` are converted to RGB and returned. keep = 0 checks only.
VideoClip decode_video_file(const std::filesystem::path& file, std::string_view field, const VideoLimits& limits = {},
                            int keep = 0);

// The same checks and full decode, handing each frame as RGB to `on_frame` (its index from 0,
// in order) instead of keeping it: a caller that shrinks or picks frames holds one full-size
// frame at a time. Returns the clip with `kept` empty. An exception from on_frame propagates.
VideoClip for_each_video_frame(const std::filesystem::path& file, std::string_view field, const VideoLimits& limits,
                               const std::function<void(int index, RgbImage&& frame)>& on_frame);

// SHA-256 of the file's bytes (64 lowercase hex characters), refusing a file over
// limits.max_bytes before reading it: what a job's content key and an upload's name use.
std::string video_file_sha256(const std::filesystem::path& file, std::string_view field, const VideoLimits& limits = {});

// The file extension an upload of this container is stored under (".mp4", ".webm", ...).
std::string_view video_extension(const VideoHeader& header);

}  // namespace vgen
