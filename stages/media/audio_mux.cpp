#include "stages/media/audio_mux.hpp"

extern "C" {
#include <libavutil/audio_fifo.h>
#include <libavutil/channel_layout.h>
#include <libswresample/swresample.h>
}

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "runtime/errors.hpp"

namespace vgen {
namespace {

[[noreturn]] void reject(const std::string& what) { throw Error(ErrorKind::invalid_argument, "audio: " + what); }

struct SwrFree {
  void operator()(SwrContext* c) const { swr_free(&c); }
};
struct FifoFree {
  void operator()(AVAudioFifo* f) const { av_audio_fifo_free(f); }
};

// The encoder's format closest to our float input: no quantisation when it takes floats.
AVSampleFormat pick_sample_format(const AVCodec* codec) {
  if (codec->sample_fmts == nullptr) return AV_SAMPLE_FMT_FLTP;
  for (AVSampleFormat want : {AV_SAMPLE_FMT_FLTP, AV_SAMPLE_FMT_FLT})
    for (const AVSampleFormat* f = codec->sample_fmts; *f != AV_SAMPLE_FMT_NONE; ++f)
      if (*f == want) return want;
  return codec->sample_fmts[0];
}

// The track's own rate when the encoder takes it: resampling only when it must.
int pick_sample_rate(const AVCodec* codec, int wanted) {
  if (codec->supported_samplerates == nullptr) return wanted;
  int highest = 0;
  bool has_48k = false;
  for (const int* r = codec->supported_samplerates; *r != 0; ++r) {
    if (*r == wanted) return wanted;
    has_48k = has_48k || *r == 48000;
    highest = std::max(highest, *r);
  }
  return has_48k ? 48000 : highest;
}

}  // namespace

void validate_audio_track(const AudioTrack& track) {
  if (track.channels != 1 && track.channels != 2) reject("channels must be 1 or 2, got " + std::to_string(track.channels));
  if (track.sample_rate < 1000 || track.sample_rate > 384000)
    reject("sample_rate must be in [1000, 384000], got " + std::to_string(track.sample_rate));
  if (track.samples.empty()) reject("the track has no samples");
  if (track.samples.size() % static_cast<std::size_t>(track.channels) != 0)
    reject(std::to_string(track.samples.size()) + " samples do not divide into " + std::to_string(track.channels) + " channels");
  for (float s : track.samples)
    if (!std::isfinite(s)) reject("the track holds a sample that is not finite (NaN or infinity)");
}

struct AudioStreamWriter::State {
  AVFormatContext* fmt = nullptr;
  AVStream* stream = nullptr;
  av::CodecContextPtr codec;
  std::unique_ptr<AVAudioFifo, FifoFree> fifo;  // the whole track, converted
  av::PacketPtr packet = av::alloc_packet();
  std::int64_t next_pts = 0;  // in samples at the output rate
  int frame_size = 0;
  bool finished = false;
  std::function<void(const AVPacket*)> copy;  // the live stream's
};

AudioStreamWriter::AudioStreamWriter(AVFormatContext* fmt, const AudioTrack& track, const char* codec_name, int threads)
    : state_(std::make_unique<State>()) {
  validate_audio_track(track);
  State& s = *state_;
  s.fmt = fmt;
  const AVCodec* codec = avcodec_find_encoder_by_name(codec_name);
  if (codec == nullptr) throw Error(ErrorKind::internal, std::string("FFmpeg has no audio encoder ") + codec_name);
  s.codec.reset(av::check_alloc(avcodec_alloc_context3(codec), "allocating the audio encoder"));
  AVCodecContext* c = s.codec.get();
  c->sample_fmt = pick_sample_format(codec);
  c->sample_rate = pick_sample_rate(codec, track.sample_rate);
  av_channel_layout_default(&c->ch_layout, track.channels);
  c->time_base = AVRational{1, c->sample_rate};
  c->thread_count = threads;
  if (codec->id == AV_CODEC_ID_AAC) c->bit_rate = 64000 * track.channels;
  if (codec->id == AV_CODEC_ID_OPUS) c->bit_rate = 48000 * track.channels;
  if (fmt->oformat->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  av::check(avcodec_open2(c, codec, nullptr), std::string("opening ") + codec_name);
  // PCM encoders take any frame size; 1024 keeps packets small and interleaving fine.
  s.frame_size = c->frame_size > 0 ? c->frame_size : 1024;

  s.stream = av::check_alloc(avformat_new_stream(fmt, nullptr), "creating the audio stream");
  av::check(avcodec_parameters_from_context(s.stream->codecpar, c), "copying audio codec parameters");
  s.stream->time_base = c->time_base;

  // Convert everything now: a clip's sound is seconds long, and one conversion needs no
  // bookkeeping of the resampler's delay between calls.
  AVChannelLayout in_layout;
  av_channel_layout_default(&in_layout, track.channels);
  SwrContext* raw = nullptr;
  av::check(swr_alloc_set_opts2(&raw, &c->ch_layout, c->sample_fmt, c->sample_rate, &in_layout, AV_SAMPLE_FMT_FLT,
                                track.sample_rate, 0, nullptr),
            "creating the audio resampler");
  std::unique_ptr<SwrContext, SwrFree> swr(raw);
  av::check(swr_init(swr.get()), "starting the audio resampler");
  const int in_frames = static_cast<int>(track.frames());
  const int capacity = swr_get_out_samples(swr.get(), in_frames) + 64;
  s.fifo.reset(av::check_alloc(av_audio_fifo_alloc(c->sample_fmt, track.channels, capacity), "allocating audio buffers"));
  av::FramePtr converted = av::alloc_frame();
  converted->format = c->sample_fmt;
  converted->nb_samples = capacity;
  av::check(av_channel_layout_copy(&converted->ch_layout, &c->ch_layout), "copying the channel layout");
  av::check(av_frame_get_buffer(converted.get(), 0), "allocating audio buffers");
  const auto* input = reinterpret_cast<const std::uint8_t*>(track.samples.data());
  for (const std::uint8_t* in : {input, static_cast<const std::uint8_t*>(nullptr)}) {  // the samples, then the flush
    const int n = av::check(swr_convert(swr.get(), converted->data, capacity, in == nullptr ? nullptr : &in,
                                        in == nullptr ? 0 : in_frames),
                            "resampling the audio");
    if (n > 0 && av_audio_fifo_write(s.fifo.get(), reinterpret_cast<void**>(converted->data), n) < n)
      av::check(AVERROR(ENOMEM), "buffering the audio");
  }
}

AudioStreamWriter::~AudioStreamWriter() = default;

int AudioStreamWriter::output_sample_rate() const noexcept { return state_->codec->sample_rate; }

const AVCodecContext* AudioStreamWriter::codec() const noexcept { return state_->codec.get(); }

void AudioStreamWriter::set_packet_copy(std::function<void(const AVPacket*)> copy) { state_->copy = std::move(copy); }

void AudioStreamWriter::write_frames(std::int64_t until_sample, bool flush) {
  State& s = *state_;
  AVCodecContext* c = s.codec.get();
  auto drain = [&] {
    for (;;) {
      const int e = avcodec_receive_packet(c, s.packet.get());
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return;
      av::check(e, "receiving an audio packet");
      if (s.copy) s.copy(s.packet.get());
      av_packet_rescale_ts(s.packet.get(), c->time_base, s.stream->time_base);
      s.packet->stream_index = s.stream->index;
      av::check(av_interleaved_write_frame(s.fmt, s.packet.get()), "writing an audio packet");
    }
  };
  while (s.next_pts < until_sample && av_audio_fifo_size(s.fifo.get()) > 0) {
    // Every frame but the last is full; libavcodec pads a short last frame for encoders that
    // need it (AAC), and the muxer's duration still ends at the track's last sample.
    const int n = std::min(s.frame_size, av_audio_fifo_size(s.fifo.get()));
    av::FramePtr frame = av::alloc_frame();
    frame->format = c->sample_fmt;
    frame->sample_rate = c->sample_rate;
    frame->nb_samples = n;
    av::check(av_channel_layout_copy(&frame->ch_layout, &c->ch_layout), "copying the channel layout");
    av::check(av_frame_get_buffer(frame.get(), 0), "allocating an audio frame");
    if (av_audio_fifo_read(s.fifo.get(), reinterpret_cast<void**>(frame->data), n) < n)
      av::check(AVERROR_BUG, "reading buffered audio");
    frame->pts = s.next_pts;
    s.next_pts += n;
    av::check(avcodec_send_frame(c, frame.get()), "sending audio to the encoder");
    drain();
  }
  if (flush) {
    av::check(avcodec_send_frame(c, nullptr), "flushing the audio encoder");
    drain();
  }
}

void AudioStreamWriter::write_until(double seconds) {
  write_frames(static_cast<std::int64_t>(std::ceil(seconds * state_->codec->sample_rate)), false);
}

void AudioStreamWriter::finish() {
  if (state_->finished) return;
  state_->finished = true;
  write_frames(INT64_MAX, true);
}

void write_wav(const AudioTrack& track, const std::filesystem::path& path) {
  AVFormatContext* raw = nullptr;
  av::check(avformat_alloc_output_context2(&raw, nullptr, "wav", path.c_str()), "creating the wav muxer");
  av::FileIoPtr io;  // declared first: outlives fmt
  av::OutputFormatPtr fmt(raw);
  {
    AudioStreamWriter writer(fmt.get(), track, "pcm_s16le", 1);
    AVIOContext* pb = nullptr;
    av::check(avio_open(&pb, path.c_str(), AVIO_FLAG_WRITE), "opening " + path.string());
    io.reset(pb);
    fmt->pb = io.get();
    av::check(avformat_write_header(fmt.get(), nullptr), "writing the wav header");
    writer.finish();
    av::check(av_write_trailer(fmt.get()), "finishing the wav output");
  }
  fmt.reset();
  if (AVIOContext* pb = io.release()) av::check(avio_closep(&pb), "closing " + path.string());
}

}  // namespace vgen
