#include "stages/media/encode.hpp"
#include "stages/media/streamed_encode.hpp"

#include "stages/media/audio_mux.hpp"
#include "stages/media/fragment_tap.hpp"
#include "stages/media/frame_fill.hpp"
#include "stages/media/libav.hpp"
#include "stages/media/x264_cpu.hpp"

extern "C" {
#include <libavutil/avutil.h>
#include <libavutil/imgutils.h>
#include <libavutil/mem.h>
#include <libavutil/opt.h>
}

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "runtime/atomic_file.hpp"
#include "runtime/errors.hpp"
#include "runtime/registry.hpp"

namespace vgen {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void reject(const std::string& message) {
  throw Error(ErrorKind::invalid_argument, message);
}

// libav logs from encoder threads too; spdlog's default logger is thread-safe.
void forward_av_log(void* object, int level, const char* format, va_list args) {
  if (level > av_log_get_level()) return;
  char line[1024];
  int print_prefix = 1;
  av_log_format_line2(object, level, format, args, line, sizeof line, &print_prefix);
  std::string_view text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  spdlog::log(level <= AV_LOG_FATAL ? spdlog::level::critical : spdlog::level::err, "libav: {}",
              text);
}

void init_av_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    av_log_set_level(AV_LOG_ERROR);
    av_log_set_callback(forward_av_log);
  });
}

// ---- the encode loop ----

av::FramePtr make_frame(const AVCodecContext* codec) {
  av::FramePtr frame(av::check_alloc(av_frame_alloc(), "allocating a frame"));
  frame->format = codec->pix_fmt;
  frame->width = codec->width;
  frame->height = codec->height;
  av::check(av_frame_get_buffer(frame.get(), 0), "allocating frame buffers");
  return frame;
}

// Sends one frame (nullptr flushes) and hands each packet the encoder has ready to `sink`.
template <typename Sink>
void encode_frame(AVCodecContext* codec, const AVFrame* frame, AVPacket* packet, Sink&& sink) {
  av::check(avcodec_send_frame(codec, frame), "sending a frame to the encoder");
  while (true) {
    const int ret = avcodec_receive_packet(codec, packet);
    if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return;
    av::check(ret, "receiving a packet from the encoder");
    sink(packet);
    av_packet_unref(packet);
  }
}

// ---- formats ----

// A seekable in-memory AVIO target, so muxers can patch headers (durations, cues) as in a file.
struct MemorySink {
  std::vector<std::uint8_t> bytes;
  std::int64_t position = 0;

  static int write(void* opaque, std::uint8_t* data, int size) {  // FFmpeg 5.1: non-const buf
    auto* self = static_cast<MemorySink*>(opaque);
    try {
      const auto end = static_cast<std::size_t>(self->position) + static_cast<std::size_t>(size);
      if (end > self->bytes.size()) self->bytes.resize(end);
      std::memcpy(self->bytes.data() + self->position, data, static_cast<std::size_t>(size));
    } catch (const std::bad_alloc&) {  // never let an exception cross into C
      return AVERROR(ENOMEM);
    }
    self->position += size;
    return size;
  }
  static std::int64_t seek(void* opaque, std::int64_t offset, int whence) {
    auto* self = static_cast<MemorySink*>(opaque);
    const auto size = static_cast<std::int64_t>(self->bytes.size());
    std::int64_t target = 0;
    switch (whence & ~AVSEEK_FORCE) {
      case AVSEEK_SIZE: return size;
      case SEEK_SET: target = offset; break;
      case SEEK_CUR: target = self->position + offset; break;
      case SEEK_END: target = size + offset; break;
      default: return AVERROR(EINVAL);
    }
    if (target < 0) return AVERROR(EINVAL);
    return self->position = target;
  }
};

// What a libav format is made of, besides its public Info.
struct CodecSpec {
  const char* muxer;
  const char* codec;
  AVPixelFormat pixel_format;
  const char* audio_codec = nullptr;  // null: the container takes no sound (a WAV beside it)
};

// A codec in a container. The built-in formats share this encode/mux loop and differ in their
// spec and the hooks below. Implementations hold no state: everything lives in a call.
class LibavEncoder : public FormatEncoder {
 public:
  LibavEncoder(Info info, CodecSpec spec) : FormatEncoder(std::move(info)), spec_(spec) {}

  void write_file(const VideoFrames& frames, const fs::path& path,
                  const EncodeOptions& options) const override {
    mux_to_file(frames, nullptr, path.string(), options);
  }

  std::vector<std::uint8_t> write_memory(const VideoFrames& frames,
                                         const EncodeOptions& options) const override {
    return mux_to_memory(frames, nullptr, options);
  }

  bool muxes_audio() const override { return spec_.audio_codec != nullptr; }
  void write_file_with_audio(const VideoFrames& frames, const AudioTrack& audio, const fs::path& path,
                             const EncodeOptions& options) const override {
    mux_to_file(frames, &audio, path.string(), options);
  }
  void write_file_live(const VideoFrames& frames, const AudioTrack* audio, const fs::path& path,
                       const EncodeOptions& options, LiveBroadcast& live) const override {
    mux_to_file(frames, audio, path.string(), options, &live);
  }
  // write_file_live over a clip still being written (stages/media/streamed_encode.hpp).
  void write_file_live_as_frames_arrive(const VideoFrames& frames, const AudioTrack* audio, const fs::path& path,
                                        const EncodeOptions& options, LiveBroadcast& live, const FrameWait& wait) const {
    mux_to_file(frames, audio, path.string(), options, &live, wait);
  }
  std::vector<std::uint8_t> write_memory_with_audio(const VideoFrames& frames, const AudioTrack& audio,
                                                    const EncodeOptions& options) const override {
    return mux_to_memory(frames, &audio, options);
  }

 protected:
  std::vector<std::uint8_t> mux_to_memory(const VideoFrames& frames, const AudioTrack* audio,
                                          const EncodeOptions& options) const {
    constexpr int buffer_size = 64 * 1024;
    MemorySink sink;
    auto* buffer = static_cast<std::uint8_t*>(av::check_alloc(av_malloc(buffer_size), "AVIO buffer"));
    AVIOContext* raw = avio_alloc_context(buffer, buffer_size, 1, &sink, nullptr,
                                          &MemorySink::write, &MemorySink::seek);
    if (raw == nullptr) av_free(buffer);
    av::CustomIoPtr io(av::check_alloc(raw, "allocating AVIO"));
    av::OutputFormatPtr fmt = alloc_muxer(nullptr);  // destroyed before io
    fmt->pb = io.get();
    fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    mux(frames, audio, fmt.get(), options, true);
    avio_flush(io.get());
    av::check(io->error, "writing the output to memory");
    return std::move(sink.bytes);
  }

  void mux_to_file(const VideoFrames& frames, const AudioTrack* audio, const std::string& url,
                   const EncodeOptions& options, LiveBroadcast* live = nullptr, const FrameWait& wait = {}) const {
    av::FileIoPtr io;                                     // declared first: outlives fmt
    av::OutputFormatPtr fmt = alloc_muxer(url.c_str());  // url is kept: faststart reopens it
    if (!(fmt->oformat->flags & AVFMT_NOFILE)) {  // image2 opens one file per frame itself
      AVIOContext* pb = nullptr;
      av::check(avio_open(&pb, url.c_str(), AVIO_FLAG_WRITE), "opening " + url);
      io.reset(pb);
      fmt->pb = io.get();
    }
    mux(frames, audio, fmt.get(), options, false, live, wait);
    fmt.reset();
    if (AVIOContext* pb = io.release()) av::check(avio_closep(&pb), "closing " + url);
  }

  virtual void configure(AVCodecContext* /*codec*/, const EncodeOptions& /*options*/) const {}
  virtual void muxer_options(av::Dictionary& /*options*/, bool /*in_memory*/) const {}
  virtual std::unique_ptr<FrameFiller> make_filler(const VideoFrames& frames) const {
    return std::make_unique<YuvFiller>(frames.width, frames.height);
  }

 private:
  CodecSpec spec_;

  av::OutputFormatPtr alloc_muxer(const char* url) const {
    AVFormatContext* raw = nullptr;
    av::check(avformat_alloc_output_context2(&raw, nullptr, spec_.muxer, url),
             std::string("creating the ") + spec_.muxer + " muxer");
    return av::OutputFormatPtr(raw);
  }

  av::CodecContextPtr open_encoder(const VideoFrames& frames, const EncodeOptions& options,
                               bool global_header) const {
    const AVCodec* codec = avcodec_find_encoder_by_name(spec_.codec);
    if (codec == nullptr) {
      throw Error(ErrorKind::internal, std::string("FFmpeg has no encoder ") + spec_.codec);
    }
    av::CodecContextPtr ctx(av::check_alloc(avcodec_alloc_context3(codec), "allocating the encoder"));
    const AVRational rate = av_d2q(frames.fps, 100000);
    ctx->width = frames.width;
    ctx->height = frames.height;
    ctx->pix_fmt = spec_.pixel_format;
    ctx->framerate = rate;
    ctx->time_base = av_inv_q(rate);  // frame i has pts i
    ctx->thread_count = options.threads;
    if (global_header) ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    configure(ctx.get(), options);
    av::check(avcodec_open2(ctx.get(), codec, nullptr), std::string("opening ") + spec_.codec);
    return ctx;
  }

  void mux(const VideoFrames& frames, const AudioTrack* audio, AVFormatContext* fmt,
           const EncodeOptions& options, bool in_memory, LiveBroadcast* live = nullptr, const FrameWait& wait = {}) const {
    std::unique_ptr<FrameFiller> filler = make_filler(frames);
    AVStream* stream = av::check_alloc(avformat_new_stream(fmt, nullptr), "creating the video stream");
    av::CodecContextPtr ctx = open_encoder(frames, options, fmt->oformat->flags & AVFMT_GLOBALHEADER);
    av::check(avcodec_parameters_from_context(stream->codecpar, ctx.get()),
             "copying codec parameters");
    stream->time_base = ctx->time_base;  // a hint: the muxer picks the final one in write_header
    stream->avg_frame_rate = ctx->framerate;
    stream->r_frame_rate = ctx->framerate;
    std::optional<AudioStreamWriter> sound;  // stream 1, after the video's stream 0
    if (audio != nullptr) sound.emplace(fmt, *audio, spec_.audio_codec, options.threads);
    if (!options.comment.empty())
      av::check(av_dict_set(&fmt->metadata, "comment", options.comment.c_str(), 0), "setting the comment tag");
    av::Dictionary mux_options;
    muxer_options(mux_options, in_memory);
    av::check(avformat_write_header(fmt, mux_options.address()),
             std::string("writing the ") + spec_.muxer + " header");

    av::FramePtr frame = make_frame(ctx.get());
    av::PacketPtr packet(av::check_alloc(av_packet_alloc(), "allocating a packet"));
    // The same packets, muxed again for watchers; made after the file's header so that a header
    // failure leaves no stream behind.
    std::optional<FragmentTap> tap;
    if (live != nullptr) {
      tap.emplace(ctx.get(), sound ? sound->codec() : nullptr, *live);
      if (sound) sound->set_packet_copy([&tap](const AVPacket* p) { tap->write_audio(p); });
    }
    auto write_packet = [&](AVPacket* p) {
      if (p->duration == 0) p->duration = 1;  // constant frame rate: one tick of 1/fps
      if (tap) tap->write(p);  // a copy, before the file's muxer takes the packet
      av_packet_rescale_ts(p, ctx->time_base, stream->time_base);
      p->stream_index = stream->index;
      av::check(av_interleaved_write_frame(fmt, p), "writing a packet");
    };
    for (int i = 0; i < frames.count; ++i) {
      if (wait) wait(i);
      av::check(av_frame_make_writable(frame.get()), "making the frame writable");
      filler->fill(frames.frame(i), frame.get());
      frame->pts = i;
      encode_frame(ctx.get(), frame.get(), packet.get(), write_packet);
      if (sound) sound->write_until((i + 1) / frames.fps);  // the sound under this frame: interleaved
    }
    encode_frame(ctx.get(), nullptr, packet.get(), write_packet);
    if (sound) sound->finish();
    if (tap) tap->finish();
    av::check(av_write_trailer(fmt), std::string("finishing the ") + spec_.muxer + " output");
  }
};

void require(bool ok, const std::string& message) {
  if (!ok) reject(message);
}

void require_even(const VideoFrames& frames, std::string_view format) {
  require(frames.width % 2 == 0 && frames.height % 2 == 0,
          std::string(format) + " (yuv420p) needs an even width and height, got width " +
              std::to_string(frames.width) + " and height " + std::to_string(frames.height));
}

void require_crf(int crf, int max, std::string_view format) {
  require(crf >= 0 && crf <= max, "crf for " + std::string(format) + " must be in [0, " +
                                       std::to_string(max) + "], got " + std::to_string(crf));
}

void tag_bt709(AVCodecContext* c) {
  c->color_primaries = AVCOL_PRI_BT709;
  c->color_trc = AVCOL_TRC_BT709;
  c->colorspace = AVCOL_SPC_BT709;
  c->color_range = AVCOL_RANGE_MPEG;
}

// EncodeOptions::keyframe_interval_s in frames (at least one).
int gop_frames(const AVCodecContext* c, const EncodeOptions& options) {
  return std::max(1, static_cast<int>(std::lround(options.keyframe_interval_s * av_q2d(c->framerate))));
}

void set_private(AVCodecContext* c, const char* key, const std::string& value) {
  av::check(av_opt_set(c->priv_data, key, value.c_str(), 0),
           std::string("setting encoder option ") + key);
}

struct Mp4Encoder final : LibavEncoder {
  Mp4Encoder()
      : LibavEncoder({"mp4", "video/mp4", ".mp4"}, {"mp4", "libx264", AV_PIX_FMT_YUV420P, "aac"}) {}
  void check(const VideoFrames& frames, const EncodeOptions& options) const override {
    require_even(frames, "mp4");
    require_crf(options.crf, 51, "mp4");
    static constexpr std::array<std::string_view, 10> presets = {
        "ultrafast", "superfast", "veryfast", "faster", "fast",
        "medium",    "slow",      "slower",   "veryslow", "placebo"};
    require(std::find(presets.begin(), presets.end(), options.preset) != presets.end(),
            "unknown x264 preset '" + options.preset + "' (ultrafast ... placebo)");
  }
  void configure(AVCodecContext* c, const EncodeOptions& options) const override {
    tag_bt709(c);
    c->gop_size = gop_frames(c, options);
    set_private(c, "preset", options.preset);
    set_private(c, "crf", std::to_string(options.crf));
    // The same frames, the same bytes: without x264's AVX-512 kernels (stages/media/x264_cpu.hpp).
    if (const auto& cpu = x264_asm_option(); !cpu.empty()) set_private(c, "x264-params", cpu);
  }
  bool streams_live() const override { return true; }
  void muxer_options(av::Dictionary& options, bool in_memory) const override {
    options.set("movflags",
                in_memory ? "frag_keyframe+empty_moov+default_base_moof" : "+faststart");
  }
};

struct WebmEncoder final : LibavEncoder {
  WebmEncoder()
      : LibavEncoder({"webm", "video/webm", ".webm"}, {"webm", "libvpx-vp9", AV_PIX_FMT_YUV420P, "libopus"}) {}
  void check(const VideoFrames& frames, const EncodeOptions& options) const override {
    require_even(frames, "webm");
    require_crf(options.crf, 63, "webm");
  }
  void configure(AVCodecContext* c, const EncodeOptions& options) const override {
    tag_bt709(c);
    c->gop_size = gop_frames(c, options);
    c->bit_rate = 0;  // with crf: constant-quality mode
    set_private(c, "crf", std::to_string(options.crf));
    set_private(c, "deadline", "good");
    set_private(c, "cpu-used", "4");  // libvpx's speed/quality knob; 4 keeps VP9 usable on CPU
    set_private(c, "row-mt", "1");
  }
};

struct GifEncoder final : LibavEncoder {
  GifEncoder() : LibavEncoder({"gif", "image/gif", ".gif"}, {"gif", "gif", AV_PIX_FMT_PAL8}) {}
  std::unique_ptr<FrameFiller> make_filler(const VideoFrames& frames) const override {
    return std::make_unique<PaletteFiller>(frames);
  }
};

struct PngEncoder final : LibavEncoder {
  PngEncoder() : LibavEncoder({"png", "image/png", ""}, {"image2", "png", AV_PIX_FMT_RGB24}) {}
  // zlib's fastest level instead of its default (6): the frames are lossless at every level, and
  // writing them was a sixth of a GPU job (81 frames at 832x480: 4.97 s, docs/PERFORMANCE.md).
  // Measured with this FFmpeg (5.1), 81 frames at 832x480, one thread, load 5.6 on 2 cores,
  // 2026-11-27: testsrc2 1.21 s -> 0.70 s for 5 % more bytes; noise 5.42 s -> 4.86 s, +0.2 %.
  void configure(AVCodecContext* c, const EncodeOptions&) const override { c->compression_level = 1; }
  void write_file(const VideoFrames& frames, const fs::path& dir,
                  const EncodeOptions& options) const override {
    std::error_code ec;
    if (!fs::create_directory(dir, ec)) {
      throw Error(ec ? io_error_kind(ec.value()) : ErrorKind::internal,
                  "creating " + dir.string() + ": " + (ec ? ec.message() : "it exists"));
    }
    std::string pattern;  // image2 expands %d: a '%' in the directory must read as itself
    for (char c : (dir / "frame_%05d.png").string()) pattern += c == '%' ? "%%" : std::string(1, c);
    pattern.replace(pattern.rfind("%%05d"), 5, "%05d");
    mux_to_file(frames, nullptr, pattern, options);
  }
  std::vector<std::uint8_t> write_memory(const VideoFrames&, const EncodeOptions&) const override {
    reject("format png writes a directory of files and cannot be encoded to memory");
  }
  void muxer_options(av::Dictionary& options, bool) const override {
    options.set("start_number", "0");
  }
  std::unique_ptr<FrameFiller> make_filler(const VideoFrames&) const override {
    return std::make_unique<RgbFiller>();
  }
};

// ---- the registry ----

Registry<std::shared_ptr<const FormatEncoder>>& encoders() {
  static Registry<std::shared_ptr<const FormatEncoder>> registry(
      "output format", {{"mp4", std::make_shared<Mp4Encoder>()},
                        {"webm", std::make_shared<WebmEncoder>()},
                        {"gif", std::make_shared<GifEncoder>()},
                        {"png", std::make_shared<PngEncoder>()}});
  return registry;
}

std::shared_ptr<const FormatEncoder> find_encoder(std::string_view format) {
  init_av_logging();
  return encoders().get(format);
}

// Validates everything before any file is touched.
std::shared_ptr<const FormatEncoder> checked_encoder(const VideoFrames& frames,
                                                     const EncodeOptions& options) {
  auto encoder = find_encoder(options.format);
  frames.validate();
  require(options.threads >= 1 && options.threads <= 64,
          "threads must be in [1, 64], got " + std::to_string(options.threads));
  require(options.keyframe_interval_s >= 0.01 && options.keyframe_interval_s <= 3600,
          "keyframe_interval_s must be in [0.01, 3600], got " + std::to_string(options.keyframe_interval_s));
  encoder->check(frames, options);
  return encoder;
}

}  // namespace

void FormatEncoder::write_file_with_audio(const VideoFrames&, const AudioTrack&, const fs::path&,
                                          const EncodeOptions&) const {
  throw Error(ErrorKind::internal, "output format " + info_.name + " has no audio stream");
}

std::vector<std::uint8_t> FormatEncoder::write_memory_with_audio(const VideoFrames&, const AudioTrack&,
                                                                 const EncodeOptions&) const {
  throw Error(ErrorKind::internal, "output format " + info_.name + " has no audio stream");
}

void register_encoder(std::shared_ptr<const FormatEncoder> encoder) {
  if (!encoder) reject("register_encoder needs an encoder");
  std::string name = encoder->info().name;
  encoders().add(std::move(name), std::move(encoder));
}

std::vector<std::string> encoder_formats() { return encoders().names(); }

std::string content_type_for(std::string_view format) {
  return find_encoder(format)->info().content_type;
}

std::string extension_for(std::string_view format) { return find_encoder(format)->info().extension; }

void encode_to_file(const VideoFrames& frames, const std::filesystem::path& out,
                    const EncodeOptions& options) {
  encode_to_file(frames, nullptr, out, options);
}

fs::path audio_sidecar_path(const fs::path& out, std::string_view format) {
  const auto encoder = find_encoder(format);
  if (encoder->muxes_audio()) return {};
  if (encoder->info().extension.empty()) return out / "audio.wav";  // a directory format
  return fs::path(out).replace_extension(".wav");
}

bool streams_live(std::string_view format) { return find_encoder(format)->streams_live(); }

void FormatEncoder::write_file_live(const VideoFrames&, const AudioTrack*, const fs::path&, const EncodeOptions&,
                                    LiveBroadcast&) const {
  throw Error(ErrorKind::internal, "output format " + info_.name + " has no live stream");
}

void encode_to_file(const VideoFrames& frames, const AudioTrack* audio, const std::filesystem::path& out,
                    const EncodeOptions& options) {
  encode_to_file(frames, audio, out, options, nullptr);
}

void encode_to_file(const VideoFrames& frames, const AudioTrack* audio, const std::filesystem::path& out,
                    const EncodeOptions& options, LiveBroadcast* live) {
  encode_to_file_as_frames_arrive(frames, audio, out, options, live, FrameWait());
}

// Declared in stages/media/streamed_encode.hpp (its only caller besides the overload above) and
// defined here, beside the libav loop it drives: encode.hpp is included by most of api/ and
// stays as it was.
void encode_to_file_as_frames_arrive(const VideoFrames& frames, const AudioTrack* audio, const std::filesystem::path& out,
                                     const EncodeOptions& options, LiveBroadcast* live, const FrameWait& wait) {
  const auto encoder = checked_encoder(frames, options);
  if (audio != nullptr) validate_audio_track(*audio);
  if (out.filename().empty()) reject("output path names no file: '" + out.string() + "'");
  const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) reject("output directory does not exist: " + dir.string());
  if (live != nullptr && encoder->streams_live() && (audio == nullptr || encoder->muxes_audio())) {
    write_atomically(out, [&](const fs::path& temporary) {
      if (const auto* libav = dynamic_cast<const LibavEncoder*>(encoder.get()); libav && wait)
        libav->write_file_live_as_frames_arrive(frames, audio, temporary, options, *live, wait);
      else {
        if (wait && frames.count > 0) wait(frames.count - 1);  // another encoder: the whole clip first
        encoder->write_file_live(frames, audio, temporary, options, *live);
      }
    });
    spdlog::debug("encoded {} frames {}x{} as {} to {} (live)", frames.count, frames.width, frames.height, options.format, out.string());
    return;
  }
  // Only the live encode takes frames as they come; every other output waits for the clip.
  if (wait && frames.count > 0) wait(frames.count - 1);
  if (audio == nullptr) {
    write_atomically(out, [&](const fs::path& temporary) { encoder->write_file(frames, temporary, options); });
  } else if (encoder->muxes_audio()) {
    write_atomically(out, [&](const fs::path& temporary) {
      encoder->write_file_with_audio(frames, *audio, temporary, options);
    });
  } else if (encoder->info().extension.empty()) {  // a directory: the WAV goes in with the frames
    write_atomically(out, [&](const fs::path& temporary) {
      encoder->write_file(frames, temporary, options);
      write_wav(*audio, audio_sidecar_path(temporary, options.format));
    });
  } else {  // the WAV first: an output in place then always has its sound beside it
    write_atomically(audio_sidecar_path(out, options.format), [&](const fs::path& temporary) { write_wav(*audio, temporary); });
    write_atomically(out, [&](const fs::path& temporary) { encoder->write_file(frames, temporary, options); });
  }
  spdlog::debug("encoded {} frames {}x{} as {} to {}", frames.count, frames.width, frames.height,
                options.format, out.string());
}

std::vector<std::uint8_t> encode_to_memory(const VideoFrames& frames,
                                           const EncodeOptions& options) {
  return checked_encoder(frames, options)->write_memory(frames, options);
}

std::vector<std::uint8_t> encode_to_memory(const VideoFrames& frames, const AudioTrack* audio,
                                           const EncodeOptions& options) {
  const auto encoder = checked_encoder(frames, options);
  if (audio == nullptr) return encoder->write_memory(frames, options);
  validate_audio_track(*audio);
  if (!encoder->muxes_audio())
    reject("output format " + options.format + " carries no sound in memory (mp4 and webm do)");
  return encoder->write_memory_with_audio(frames, *audio, options);
}

}  // namespace vgen
