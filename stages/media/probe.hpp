// Probing an encoded video with libavformat/libavcodec: its codec, size, frame count (every
// packet is decoded, so a truncated or corrupt file fails) and the "comment" tag in which vgen
// records the job key (EncodeOptions::comment). `vgen batch` uses it to decide whether an
// existing output is complete and belongs to the job, instead of trusting its file name.
// A png output (a directory of frame_NNNNN.png) is probed frame by frame.
// Sound: the first audio stream of an mp4 or webm, else the WAV that encode_to_file writes
// for a gif or png output (audio_sidecar_path: clip.gif -> clip.wav, frames/ -> frames/audio.wav)
// is decoded to the end too and reported in VideoInfo::audio; a corrupt or truncated audio
// stream fails the probe like a corrupt video.
// Blocking: decodes the whole file on the calling thread (run it on a worker thread).
// Thread-safety: independent calls may run concurrently.
#pragma once

#include <filesystem>
#include <string>

namespace vgen {

struct AudioInfo {
  std::string codec;     // "aac", "opus", "pcm_s16le"; "" when the output has no sound
  int sample_rate = 0;   // of the stream (Opus: 48000 whatever was encoded)
  int channels = 0;
  long long samples = 0;  // decoded samples per channel, after the encoder's priming is skipped
  double seconds() const { return sample_rate > 0 ? static_cast<double>(samples) / sample_rate : 0.0; }
};

struct VideoInfo {
  std::string codec;    // "h264", "vp9", "gif", "png"
  int width = 0, height = 0;
  int frames = 0;       // decoded frames
  std::string comment;  // container comment tag ("" if none)
  AudioInfo audio;      // codec "" if there is no sound
};

// Throws Error(invalid_argument, "<path>: <what is wrong>") for a missing, truncated, corrupt
// or frameless file.
VideoInfo probe_video(const std::filesystem::path& path);

}  // namespace vgen
