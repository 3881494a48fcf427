// The no-model post-stage variants, through libavfilter (FFmpeg 5.1):
//   minterpolate  motion-compensated interpolation (mi_mode=mci, bidirectional motion
//                 estimation, overlapped blocks), frames through full-range YUV 4:4:4
//   lanczos       scale with the lanczos kernel, in RGB
// Lower quality than a model: minterpolate ghosts and smears fast or large motion, lanczos
// sharpens but adds no detail. They are what a runtime uses when no post model is configured.
//
// Both keep the contract of stages/post/post_process.hpp (checked on every run): interpolating
// N frames by f gives (N - 1) x f + 1 frames at fps x f with the inputs at every f-th position
// (minterpolate passes them through unchanged but for the YUV round trip: a mean error under
// 2 levels of 255); upscaling gives width x f by height x f.
// libavfilter is not linked: it is loaded on first use (dlopen of libavfilter.so.<major>), so the
// executable and the GPU bundle carry none of its dependencies; without it both variants report
// unavailable() and the functions below throw Error(invalid_argument) saying what to install.
// Thread-safety: each call builds its own filter graph; any number may run at once.
// Blocking: CPU work on the calling thread (one filter thread per call); not cancellable.
#pragma once

#include "stages/media/frames.hpp"

namespace vgen {

// Error(invalid_argument) for a factor other than 2 or 4, an invalid clip, or an output
// frame rate above 240; Error(internal) for a libavfilter failure.
VideoFrames interpolate_frames(const VideoFrames& in, int factor);
VideoFrames upscale_frames(const VideoFrames& in, int factor);

// Adds "minterpolate" and "lanczos" to post_processors() (stages/post/post_process.hpp);
// idempotent, thread-safe.
void register_libav_post();

}  // namespace vgen
