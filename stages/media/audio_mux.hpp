// Audio beside the video: an AudioTrack (stages/media/audio_track.hpp) as one more stream of a
// libav muxer (encode.cpp's mp4 and webm), and as a WAV file of its own (gif and png outputs,
// which have no audio stream; see encode.hpp).
//
// AudioStreamWriter converts the whole track once with libswresample to what the encoder takes
// (sample format; rate: the track's own when the encoder supports it, else 48 kHz, else the
// encoder's highest; channel layout: the default for the track's channel count), then hands it
// out one encoder frame at a time, interleaved with the video by presentation time: the muxer
// receives audio up to each video frame's time (write_until), so av_interleaved_write_frame
// never has to buffer a whole stream.
//   mp4:  "aac" (FFmpeg's native AAC-LC; 7.35 to 96 kHz, so a 16 kHz track stays 16 kHz)
//   webm: "libopus" (8, 12, 16, 24, 48 kHz; others are resampled to 48 kHz)
//   wav:  "pcm_s16le" (the track's rate; samples clipped to [-1, 1])
// Lossy codecs delay their output: AAC's first 1024 samples are priming, which the mp4 muxer
// records in an edit list, so players (and probe_video) start at sample 0 of the track.
//
// Ownership: the writer borrows the AVFormatContext (which must outlive it) and owns its
// encoder, resampled samples and packets. Thread-safety: one thread at a time, like the muxer.
// Blocking: CPU bound on the calling thread; nothing here is cancellable.
// Errors: Error(invalid_argument) for an empty or malformed track (no samples, channels not 1
// or 2, sample_rate not in [1000, 384000], samples not a multiple of channels);
// Error(internal/transient) from libav as av::check.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>

#include "stages/media/audio_track.hpp"
#include "stages/media/libav.hpp"

namespace vgen {

// Error(invalid_argument, "audio: <what>") when `track` cannot be encoded (see above).
void validate_audio_track(const AudioTrack& track);

class AudioStreamWriter {
 public:
  // Adds the audio stream to `fmt` (call before avformat_write_header) and opens `codec_name`.
  // `threads` bounds the encoder's threads.
  AudioStreamWriter(AVFormatContext* fmt, const AudioTrack& track, const char* codec_name, int threads);
  ~AudioStreamWriter();
  AudioStreamWriter(const AudioStreamWriter&) = delete;
  AudioStreamWriter& operator=(const AudioStreamWriter&) = delete;

  // Encodes and writes (av_interleaved_write_frame) every frame that starts before `seconds`.
  void write_until(double seconds);
  // Writes the rest and flushes the encoder; call once, before av_write_trailer.
  void finish();

  int output_sample_rate() const noexcept;
  // The opened encoder (for a second muxer of the same packets: the live stream's).
  const AVCodecContext* codec() const noexcept;
  // Called with each packet the encoder makes, in the encoder's time base, before the muxer
  // takes it (stages/media/fragment_tap.hpp copies it). It must not change the packet: the
  // file's bytes stay those of an encode without it. Empty: none.
  void set_packet_copy(std::function<void(const AVPacket*)> copy);

 private:
  struct State;
  std::unique_ptr<State> state_;
  void write_frames(std::int64_t until_sample, bool flush);
};

// Writes `track` as a 16-bit PCM WAV file at `path` (not atomically: encode_to_file wraps it).
void write_wav(const AudioTrack& track, const std::filesystem::path& path);

}  // namespace vgen
