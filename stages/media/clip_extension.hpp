// Extending a finished clip (issue 34 item 4, the image-to-video fallback): an extend job's
// video is read at the job's size, its last frame becomes the job's first frame (the image an
// image-to-video package conditions on), and after decode the new segment is joined to it:
// the clip's frames, then the segment's less its first (which repeats the clip's last), one
// stream at the segment's (the job's) frame rate.
//
// Fitting: every input frame is resized to the job's width x height as a job's image is
// (resize_rgb, Lanczos, the aspect ratio not kept: diffusers' video processor and the Wan
// families do the same to an image), so the seam frame and the frames before it match.
//
// Errors: about the file, Error(invalid_argument) starting with the field ("video: ..."), as
// video_input's; a file whose bytes no longer hash to the admitted sha256 is refused the same
// way. join_extension's mismatched sizes are Error(internal) (the stages fitted both).
// No LibTorch here. Thread-safety: pure functions over values and files. Blocking: the read
// functions decode the whole video on the calling thread (bounded by VideoLimits: run them on
// a worker pool). Cancellation: none; a call runs to completion.
#pragma once

#include "stages/media/audio_track.hpp"
#include "stages/media/frames.hpp"
#include "stages/media/image_input.hpp"
#include "stages/media/video_input.hpp"

#include <filesystem>
#include <string>
#include <string_view>

namespace vgen {

// Which video, where its frames go: the admitted file and hash (empty: not checked), the job's size.
struct ClipSource {
  std::filesystem::path file;
  std::string sha256;
  int width = 0, height = 0;
  VideoLimits limits;
};

// Every frame of the clip fitted to the job's size; fps is the file's (0 when it does not say).
VideoFrames read_fitted_clip(const ClipSource& source, std::string_view field);
// Only its last frame, fitted the same way (one full-size frame held at a time).
RgbImage read_fitted_last_frame(const ClipSource& source, std::string_view field);

// clip's frames, then segment's from frame `overlap` on (1: its first repeats the clip's last
// frame, the image-to-video path; N: a package that extends by latents starts its segment with
// the clip's last N frames), at segment.fps. The segment needs more than `overlap` frames and
// both the same size (Error(internal) otherwise).
VideoFrames join_extension(const VideoFrames& clip, const VideoFrames& segment, int overlap = 1);

// The sound of a joined clip: the input's is not carried (the input is decoded without its
// audio), so the segment's track starts after silence as long as the clip's frames before the
// seam, (clip_frames - 1) / fps seconds, and stays in step with its frames.
AudioTrack extension_audio(const AudioTrack& segment, int clip_frames, double fps);

}  // namespace vgen
