#include "stages/media/fragment_tap.hpp"

#include "stages/media/libav.hpp"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/mem.h>
}

#include <spdlog/spdlog.h>

#include <cmath>
#include <exception>
#include <string>
#include <utility>

#include "runtime/errors.hpp"

namespace vgen {

struct FragmentTap::State {
  LiveBroadcast& out;
  const AVRational codec_time_base;
  AVRational audio_time_base{0, 1};
  bool has_audio = false;  // two streams: packets go through the muxer's interleaving
  av::CustomIoPtr io;        // declared before fmt: outlives it
  av::OutputFormatPtr fmt;
  av::PacketPtr copy = av::alloc_packet();
  std::string pending;  // what the muxer wrote since the last flush
  bool ok = true;

  State(LiveBroadcast& o, AVRational tb) : out(o), codec_time_base(tb) {}

  // The muxer writes in pieces (the mp4 muxer flushes between ftyp and moov); they are
  // collected and appended at the tap's own flush points, so a segment is the init segment or
  // one fragment.
  static int write(void* opaque, std::uint8_t* data, int size) {  // FFmpeg 5.1: non-const buf
    auto* self = static_cast<State*>(opaque);
    try {
      self->pending.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(size));
    } catch (const std::bad_alloc&) {  // never let an exception cross into C
      return AVERROR(ENOMEM);
    }
    return size;
  }

  // What the muxer has written so far, as one segment. An ended broadcast takes nothing more;
  // the encode goes on regardless.
  void flush() {
    avio_flush(io.get());
    if (pending.empty()) return;
    if (!out.append(std::exchange(pending, std::string()))) ok = false;  // ended (cap, close): stop muxing for nobody
  }

  // A copy of `packet` (in its encoder's time base) as a packet of stream `index`. With sound
  // the muxer interleaves the two streams by time (it holds a packet until the other stream
  // has caught up), so a fragment has both tracks' samples of its stretch; a silent stream
  // writes each packet at once, as it always did.
  void write(const AVPacket* packet, int index) {
    if (!ok) return;
    try {
      av::check(av_packet_ref(copy.get(), packet), "copying a packet for the live stream");
      av_packet_rescale_ts(copy.get(), index == 0 ? codec_time_base : audio_time_base, fmt->streams[index]->time_base);
      copy->stream_index = index;
      const int ret = has_audio ? av_interleaved_write_frame(fmt.get(), copy.get()) : av_write_frame(fmt.get(), copy.get());
      av_packet_unref(copy.get());
      av::check(ret, "writing a live packet");
      flush();  // a fragment the muxer closed goes out now
    } catch (const std::exception& e) {
      av_packet_unref(copy.get());
      fail(e);
    }
  }

  void fail(const std::exception& e) {
    if (!ok) return;
    ok = false;
    spdlog::warn("live stream: stopped ({}); the file is written as usual", e.what());
    out.finish(LiveBroadcast::End::failed);
  }
};

FragmentTap::FragmentTap(const AVCodecContext* codec, LiveBroadcast& out, double fragment_s)
    : FragmentTap(codec, nullptr, out, fragment_s) {}

FragmentTap::FragmentTap(const AVCodecContext* codec, const AVCodecContext* audio, LiveBroadcast& out, double fragment_s)
    : state_(std::make_unique<State>(out, codec->time_base)) {
  auto& s = *state_;
  try {
    constexpr int buffer_size = 64 * 1024;
    auto* buffer = static_cast<std::uint8_t*>(av::check_alloc(av_malloc(buffer_size), "AVIO buffer"));
    AVIOContext* raw = avio_alloc_context(buffer, buffer_size, 1, &s, nullptr, &State::write, nullptr);
    if (raw == nullptr) av_free(buffer);
    s.io.reset(av::check_alloc(raw, "allocating AVIO"));
    AVFormatContext* f = nullptr;
    av::check(avformat_alloc_output_context2(&f, nullptr, "mp4", nullptr), "creating the live mp4 muxer");
    s.fmt.reset(f);
    s.fmt->pb = s.io.get();
    s.fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    AVStream* stream = av::check_alloc(avformat_new_stream(s.fmt.get(), nullptr), "creating the live stream");
    av::check(avcodec_parameters_from_context(stream->codecpar, codec), "copying codec parameters");
    stream->time_base = codec->time_base;
    stream->avg_frame_rate = codec->framerate;
    stream->r_frame_rate = codec->framerate;
    if (audio != nullptr) {  // stream 1, as in the file
      AVStream* sound = av::check_alloc(avformat_new_stream(s.fmt.get(), nullptr), "creating the live audio stream");
      av::check(avcodec_parameters_from_context(sound->codecpar, audio), "copying audio codec parameters");
      sound->time_base = audio->time_base;
      s.audio_time_base = audio->time_base;
      s.has_audio = true;
    }
    av::Dictionary options;
    options.set("movflags", "frag_keyframe+empty_moov+default_base_moof");
    // A fragment at least this often, keyframe or not: the first frames reach a client early.
    const auto us = static_cast<long long>(std::llround(fragment_s * 1e6));
    options.set("frag_duration", std::to_string(us > 0 ? us : 1).c_str());
    av::check(avformat_write_header(s.fmt.get(), options.address()), "writing the live mp4 header");
    s.flush();  // the init segment goes out now, before any frame
  } catch (const std::exception& e) {
    s.fail(e);
  }
}

FragmentTap::~FragmentTap() = default;

bool FragmentTap::ok() const noexcept { return state_->ok; }

void FragmentTap::write(const AVPacket* packet) { state_->write(packet, 0); }

void FragmentTap::write_audio(const AVPacket* packet) {
  if (state_->has_audio) state_->write(packet, 1);
}

void FragmentTap::finish() {
  auto& s = *state_;
  if (!s.ok) return;
  try {
    av::check(av_write_trailer(s.fmt.get()), "finishing the live mp4");
    s.flush();
  } catch (const std::exception& e) {
    s.fail(e);
  }
}

}  // namespace vgen
