// Encoding VideoFrames into a container with FFmpeg 5.1 (libavcodec/libavformat/libswscale).
//
// Formats are plug-ins chosen by name from a Registry (runtime/registry.hpp): each is a
// FormatEncoder, and register_encoder adds more. Built in (one struct each in encode.cpp, over
// a shared libav encode/mux loop):
//   "mp4"  H.264 (libx264), yuv420p, BT.709 tags; files get +faststart (moov before mdat),
//          memory output is fragmented MP4 (frag_keyframe+empty_moov+default_base_moof).
//          libx264 runs without its AVX-512 kernels, which wrote different bytes for the same
//          frames now and then (stages/media/x264_cpu.hpp).
//   "webm" VP9 (libvpx-vp9), yuv420p, BT.709 tags, constant-quality mode from crf.
//   "gif"  pal8 with one adaptive 255-colour palette per clip (median cut, no dithering) plus
//          a transparent index the gif encoder uses for unchanged pixels; loops forever.
//          GIF delays are whole centiseconds, so e.g. 16 fps plays as 6/6/7/6... cs.
//   "png"  a directory of frame_00000.png, frame_00001.png, ... (RGB24; fps is not stored).
//
// Sound (a job's AudioTrack, stages/media/audio_track.hpp; stages/media/audio_mux.hpp):
//   mp4   AAC-LC (FFmpeg's native "aac") as a second stream, at the track's rate;
//   webm  Opus ("libopus") as a second stream, resampled to 48 kHz unless the track's rate is
//         one Opus takes (8, 12, 16, 24 kHz);
//   gif   no audio stream: encode_to_file writes the track as 16-bit PCM WAV beside it
//         (clip.gif -> clip.wav), before the gif, so a gif in place implies its WAV is too;
//   png   likewise, as audio.wav inside the frame directory (put in place with the frames).
//   In memory only mp4 and webm carry sound: encode_to_memory refuses gif with audio.
// A silent job (no track) takes exactly the path it took before sound existed: same bytes.
// mp4 and webm need even width and height (yuv420p) and reject odd sizes; they convert RGB
// (full range) to BT.709 limited-range YUV.
//
// Blocking and threads: every function blocks the calling thread for the whole encode (CPU
// bound; run it on a worker thread, never on an io_context thread). Each call is independent
// and may run concurrently with others; EncodeOptions::threads bounds the encoder's own
// threads per call. There is no cancellation: an encode runs to completion or failure.
//
// Errors: Error(invalid_argument) for bad frames, a bad audio track (validate_audio_track), an unknown format, bad options (odd sizes
// for mp4/webm, crf out of range, unknown x264 preset, threads < 1, keyframe_interval_s out
// of range) or a missing output
// directory; Error(transient, "<what failed>: <reason>") for a failure a retry may fix (disk
// full, I/O error: see runtime/atomic_file.hpp's io_error_kind) and Error(internal, ...) for
// any other libav or filesystem failure.
// On first use, libav logging is set (process-wide) to AV_LOG_ERROR and forwarded to spdlog.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stages/media/audio_track.hpp"
#include "stages/media/frames.hpp"

namespace vgen {

class LiveBroadcast;  // stages/media/live_broadcast.hpp

struct EncodeOptions {
  std::string format = "mp4";       // one of encoder_formats()
  int crf = 23;                     // mp4: 0..51, webm: 0..63 (lower is better); gif/png ignore it
  std::string preset = "veryfast";  // x264 preset (ultrafast ... placebo); mp4 only
  int threads = 1;                  // encoder threads for this one encode (1..64)
  // mp4, webm: the longest stretch between keyframes, in seconds of video (0.01..3600; at
  // least one frame). Shorter seeks and cuts faster and starts streams sooner, at some size.
  double keyframe_interval_s = 2.0;
  std::string comment;              // container "comment" tag (mp4, webm); vgen writes the job key
};

// One output format. Registered once and then shared: implementations hold no mutable state
// (everything lives in a call), and every member may be called from many threads at once.
class FormatEncoder {
 public:
  struct Info {
    std::string name;          // EncodeOptions::format: "mp4"
    std::string content_type;  // "video/mp4"
    std::string extension;     // with the dot: ".mp4"; "" for output that is a directory
  };
  explicit FormatEncoder(Info info) : info_(std::move(info)) {}
  virtual ~FormatEncoder() = default;
  const Info& info() const noexcept { return info_; }

  // Throws Error(invalid_argument) for valid frames and options this format cannot take.
  // Runs before anything is written.
  virtual void check(const VideoFrames& /*frames*/, const EncodeOptions& /*options*/) const {}

  // Writes the whole output at `path` (a file, or a directory of files), which does not
  // exist yet. encode_to_file passes a temporary and puts it in place atomically afterwards,
  // so a failure may leave `path` half written.
  virtual void write_file(const VideoFrames& frames, const std::filesystem::path& path,
                          const EncodeOptions& options) const = 0;

  // The output as one body; Error(invalid_argument) for a format that has none.
  virtual std::vector<std::uint8_t> write_memory(const VideoFrames& frames,
                                                 const EncodeOptions& options) const = 0;

  // Formats with an audio stream of their own (mp4, webm) override these three; for the
  // others encode_to_file writes a job's sound as a WAV file (audio_sidecar_path) and the
  // *_with_audio calls are never made. The defaults throw Error(internal).
  virtual bool muxes_audio() const { return false; }
  virtual void write_file_with_audio(const VideoFrames& frames, const AudioTrack& audio,
                                     const std::filesystem::path& path, const EncodeOptions& options) const;
  virtual std::vector<std::uint8_t> write_memory_with_audio(const VideoFrames& frames, const AudioTrack& audio,
                                                            const EncodeOptions& options) const;

  // Formats a client can watch while they are written (mp4) override these two: write_file (or
  // write_file_with_audio when `audio` is set) that also writes the video, and the sound when
  // `audio` is set, to `live` as fragmented MP4 as the encoders make it
  // (stages/media/fragment_tap.hpp). The default throws
  // Error(internal).
  virtual bool streams_live() const { return false; }
  virtual void write_file_live(const VideoFrames& frames, const AudioTrack* audio, const std::filesystem::path& path,
                               const EncodeOptions& options, LiveBroadcast& live) const;

 private:
  Info info_;
};

// Adds a format under encoder->info().name. Error(invalid_argument) for a null encoder, an
// empty name or a name already registered ("output format 'mp4' is already registered").
// Thread-safe.
void register_encoder(std::shared_ptr<const FormatEncoder> encoder);

// Registered format names, sorted: gif, mp4, png, webm and those registered since.
std::vector<std::string> encoder_formats();

// MIME type of encode output: "video/mp4", "video/webm", "image/gif"; "image/png" for png,
// which is the type of each frame file (png output is a directory, never a single body).
// Throws Error(invalid_argument) listing the known formats for an unknown name
// ("unknown output format 'avi' (known: gif, mp4, png, webm)").
std::string content_type_for(std::string_view format);

// File name extension including the dot: ".mp4", ".webm", ".gif"; "" for png (a directory).
// Throws like content_type_for.
std::string extension_for(std::string_view format);

// Encodes to `out` atomically (runtime/atomic_file.hpp's write_atomically): the output is
// built at a temporary path in the same directory (".<name>.tmp-<pid>-<random>"), synced and
// renamed onto `out` only after a complete, successful encode, replacing an existing file
// (or, for png, an existing directory). On any failure the temporary is removed and `out` is
// left as it was. The parent directory must exist.
void encode_to_file(const VideoFrames& frames, const std::filesystem::path& out,
                    const EncodeOptions& options);

// The same with the job's sound (`audio` null: exactly the silent call above). mp4 and webm
// mux it; other formats get its WAV at audio_sidecar_path(out, format), written atomically
// before the output itself. The track is validated before anything is written.
void encode_to_file(const VideoFrames& frames, const AudioTrack* audio, const std::filesystem::path& out,
                    const EncodeOptions& options);

// The same, and for a format that streams_live (mp4) the video (with `audio`: and its sound,
// as a second track interleaved by time, AAC as in the file) also goes to `live` as fragmented
// MP4 while it is encoded: the init segment first, then a fragment about every half second of
// video. The file is the same bytes as without `live` (the packets are copied, the encode is
// the same). `live` is not ended here: the caller ends it once the file is in place
// (a failure of the live muxer alone ends it failed and leaves the file alone). Other formats,
// or `live` null: exactly the call above.
void encode_to_file(const VideoFrames& frames, const AudioTrack* audio, const std::filesystem::path& out,
                    const EncodeOptions& options, LiveBroadcast* live);

// Whether `format` can be written to a LiveBroadcast (mp4). Throws like content_type_for.
bool streams_live(std::string_view format);

// Where encode_to_file puts the sound of a format without an audio stream: gif "a/clip.gif"
// -> "a/clip.wav", png "a/frames" -> "a/frames/audio.wav"; empty for mp4 and webm (and any
// format that muxes audio). Throws like content_type_for.
std::filesystem::path audio_sidecar_path(const std::filesystem::path& out, std::string_view format);

// Encodes to memory through custom AVIO (for HTTP responses). mp4 is fragmented MP4 (faststart
// needs to reopen a file, which custom I/O cannot); webm and gif are as written to a file.
// png throws Error(invalid_argument): a frame directory has no single-body form.
std::vector<std::uint8_t> encode_to_memory(const VideoFrames& frames, const EncodeOptions& options);
// With sound: mp4 and webm only; Error(invalid_argument) for a format without an audio stream.
std::vector<std::uint8_t> encode_to_memory(const VideoFrames& frames, const AudioTrack* audio,
                                           const EncodeOptions& options);

}  // namespace vgen
