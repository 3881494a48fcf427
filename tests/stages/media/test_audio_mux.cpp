// Sound through encode: a 440 Hz tone muxed as AAC (mp4) and Opus (webm), or written as a WAV
// beside a gif / inside a png directory, probes back with its codec, rate, channels and length,
// and decodes back to the tone (SNR against the analytic sine at the decoded rate: the codecs
// are lossy, so the measure is a floor, not equality). Silent encodes stay byte-identical.
#include "stages/media/audio_mux.hpp"

#include "runtime/errors.hpp"
#include "stages/media/encode.hpp"
#include "stages/media/probe.hpp"
#include "tests/support/temp_dir.hpp"

extern "C" {
#include <libswresample/swresample.h>
}

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <numbers>

namespace fs = std::filesystem;
using namespace vgen;

namespace {

AudioTrack tone(int rate, int channels, double seconds, double hz = 440.0) {
  AudioTrack t{.sample_rate = rate, .channels = channels, .samples = {}};
  const auto n = static_cast<std::size_t>(std::llround(seconds * rate));
  t.samples.resize(n * channels);
  for (std::size_t i = 0; i < n; ++i)
    for (int c = 0; c < channels; ++c)  // channel 1 a little quieter: a swapped layout shows
      t.samples[i * channels + c] = static_cast<float>((c == 0 ? 0.5 : 0.25) * std::sin(2 * std::numbers::pi * hz * i / rate));
  return t;
}

struct Decoded {
  int rate = 0, channels = 0;
  std::vector<float> samples;  // interleaved
};

// The file's first audio stream as interleaved float.
Decoded decode_audio(const fs::path& path) {
  AVFormatContext* raw = nullptr;
  REQUIRE(avformat_open_input(&raw, path.c_str(), nullptr, nullptr) == 0);
  av::InputFormatPtr fmt(raw);
  REQUIRE(avformat_find_stream_info(fmt.get(), nullptr) >= 0);
  const AVCodec* codec = nullptr;
  const int index = av_find_best_stream(fmt.get(), AVMEDIA_TYPE_AUDIO, -1, -1, &codec, 0);
  REQUIRE(index >= 0);
  av::CodecContextPtr ctx(avcodec_alloc_context3(codec));
  REQUIRE(avcodec_parameters_to_context(ctx.get(), fmt->streams[index]->codecpar) >= 0);
  REQUIRE(avcodec_open2(ctx.get(), codec, nullptr) == 0);
  Decoded out;
  out.rate = ctx->sample_rate;
  out.channels = ctx->ch_layout.nb_channels;
  SwrContext* swr_raw = nullptr;
  REQUIRE(swr_alloc_set_opts2(&swr_raw, &ctx->ch_layout, AV_SAMPLE_FMT_FLT, out.rate, &ctx->ch_layout, ctx->sample_fmt,
                              out.rate, 0, nullptr) == 0);
  std::unique_ptr<SwrContext, void (*)(SwrContext*)> swr(swr_raw, [](SwrContext* s) { swr_free(&s); });
  REQUIRE(swr_init(swr.get()) == 0);
  auto packet = av::alloc_packet();
  auto frame = av::alloc_frame();
  auto drain = [&] {
    while (avcodec_receive_frame(ctx.get(), frame.get()) == 0) {
      const auto at = out.samples.size();
      out.samples.resize(at + static_cast<std::size_t>(frame->nb_samples) * out.channels);
      auto* dst = reinterpret_cast<std::uint8_t*>(out.samples.data() + at);
      REQUIRE(swr_convert(swr.get(), &dst, frame->nb_samples, const_cast<const std::uint8_t**>(frame->extended_data),
                          frame->nb_samples) == frame->nb_samples);
      av_frame_unref(frame.get());
    }
  };
  while (av_read_frame(fmt.get(), packet.get()) >= 0) {
    if (packet->stream_index == index) {
      avcodec_send_packet(ctx.get(), packet.get());
      drain();
    }
    av_packet_unref(packet.get());
  }
  avcodec_send_packet(ctx.get(), nullptr);
  drain();
  return out;
}

// SNR in dB of channel `c` of `got` against the tone that channel was made from, over the
// samples both have (the codec's last, padded frame may add a few).
double snr_db(const Decoded& got, int c, double seconds, double hz = 440.0) {
  const double amplitude = c == 0 ? 0.5 : 0.25;
  const auto n = std::min<std::size_t>(got.samples.size() / got.channels, std::llround(seconds * got.rate));
  double signal = 0, noise = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double want = amplitude * std::sin(2 * std::numbers::pi * hz * i / got.rate);
    const double e = got.samples[i * got.channels + c] - want;
    signal += want * want;
    noise += e * e;
  }
  return 10 * std::log10(signal / std::max(noise, 1e-20));
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("a track that cannot be encoded is refused by what is wrong") {
  auto check = [](AudioTrack t, const char* word) {
    CAPTURE(word);
    try {
      validate_audio_track(t);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(std::string(e.what()).find(word) != std::string::npos);
    }
  };
  check({16000, 3, std::vector<float>(9, 0.f)}, "channels");
  check({10, 1, std::vector<float>(9, 0.f)}, "sample_rate");
  check({16000, 1, {}}, "no samples");
  check({16000, 2, std::vector<float>(9, 0.f)}, "divide");
  check({16000, 1, {0.f, std::nanf(""), 0.f}}, "finite");
  validate_audio_track(tone(16000, 2, 0.1));
}

TEST_CASE("a WAV holds the track to 16-bit precision") {
  const test::TempDir dir("vgen-audio-");
  const auto track = tone(16000, 2, 0.5);
  write_wav(track, dir.path() / "t.wav");
  const auto back = decode_audio(dir.path() / "t.wav");
  CHECK(back.rate == 16000);
  CHECK(back.channels == 2);
  REQUIRE(back.samples.size() == track.samples.size());
  float worst = 0;
  for (std::size_t i = 0; i < back.samples.size(); ++i) worst = std::max(worst, std::abs(back.samples[i] - track.samples[i]));
  CHECK(worst <= 1.0f / 32768);
}

TEST_CASE("mp4 and webm mux the tone as AAC and Opus; gif and png get a WAV" * doctest::timeout(120)) {
  const test::TempDir dir("vgen-audio-");
  // 17 frames at 16 fps: 1.0625 s of video and exactly as much sound (16 kHz, mono and stereo).
  const auto frames = make_test_pattern(64, 48, 17, 16.0, 3);
  const double seconds = 17 / 16.0;
  struct Case {
    const char* format;
    const char* codec;
    int rate;         // the stream's rate after probing
    int frame;        // samples per codec frame: the length's tolerance
    double min_snr;   // dB, measured on the decoded tone (see the report for the figures)
  } cases[] = {{"mp4", "aac", 16000, 1024, 20}, {"webm", "opus", 48000, 960, 20},
               {"gif", "pcm_s16le", 16000, 1, 80}, {"png", "pcm_s16le", 16000, 1, 80}};
  for (int channels : {1, 2}) {
    const auto track = tone(16000, channels, seconds);
    for (const auto& c : cases) {
      CAPTURE(c.format);
      CAPTURE(channels);
      const auto out = dir.path() / ("clip" + std::to_string(channels) + extension_for(c.format));
      encode_to_file(frames, &track, out, {.format = c.format, .comment = "vgen:abc"});
      const auto info = probe_video(out);
      CHECK(info.frames == 17);
      CHECK(info.audio.codec == c.codec);
      CHECK(info.audio.sample_rate == c.rate);
      CHECK(info.audio.channels == channels);
      CHECK(std::abs(info.audio.seconds() - seconds) <= static_cast<double>(c.frame) / c.rate);
      const auto sidecar = audio_sidecar_path(out, c.format);
      CHECK(sidecar.empty() == (std::string(c.format) == "mp4" || std::string(c.format) == "webm"));
      const auto back = decode_audio(sidecar.empty() ? out : sidecar);
      for (int ch = 0; ch < channels; ++ch) {
        const double snr = snr_db(back, ch, seconds);
        MESSAGE(std::string(c.format), " channels=", channels, " ch", ch, " SNR ", snr, " dB");
        CHECK(snr >= c.min_snr);
      }
    }
  }
}

TEST_CASE("a track at a rate Opus does not take is resampled to 48 kHz") {
  const test::TempDir dir("vgen-audio-");
  const auto frames = make_test_pattern(64, 48, 9, 8.0, 3);
  const auto track = tone(22050, 1, 9 / 8.0);
  encode_to_file(frames, &track, dir.path() / "a.webm", {.format = "webm"});
  encode_to_file(frames, &track, dir.path() / "a.mp4", {.format = "mp4"});
  CHECK(probe_video(dir.path() / "a.webm").audio.sample_rate == 48000);
  CHECK(snr_db(decode_audio(dir.path() / "a.webm"), 0, 9 / 8.0) >= 20);
  CHECK(probe_video(dir.path() / "a.mp4").audio.sample_rate == 22050);  // AAC takes 22.05 kHz as it is
}

TEST_CASE("silent encodes are unchanged and have no sound; memory takes sound for mp4 and webm only") {
  const test::TempDir dir("vgen-audio-");
  const auto frames = make_test_pattern(64, 48, 9, 12.0, 1);
  // webm is left out of the byte comparison: Matroska writes a random SegmentUID into every
  // file, so two silent webm encodes differ from each other too.
  for (const char* format : {"mp4", "webm", "gif"}) {
    CAPTURE(format);
    const bool deterministic = std::string(format) != "webm";
    const EncodeOptions options{.format = format, .comment = "vgen:abc"};
    encode_to_file(frames, dir.path() / "a", options);
    encode_to_file(frames, nullptr, dir.path() / "b", options);
    if (deterministic) CHECK(read_all(dir.path() / "a") == read_all(dir.path() / "b"));
    CHECK(probe_video(dir.path() / "a").audio.codec.empty());
    CHECK(probe_video(dir.path() / "b").audio.codec.empty());
    if (deterministic) CHECK(encode_to_memory(frames, options) == encode_to_memory(frames, nullptr, options));
  }
  const auto track = tone(16000, 1, 0.75);
  for (const char* format : {"mp4", "webm"}) {
    CAPTURE(format);
    const auto bytes = encode_to_memory(frames, &track, {.format = format});
    const auto file = dir.path() / (std::string("mem") + extension_for(format));
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    CHECK(probe_video(file).audio.channels == 1);
  }
  try {
    encode_to_memory(frames, &track, {.format = "gif"});
    FAIL("gif with sound in memory was accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("gif") != std::string::npos);
  }
}

TEST_CASE("a bad track is refused before anything is written") {
  const test::TempDir dir("vgen-audio-");
  const auto frames = make_test_pattern(64, 48, 9, 12.0, 1);
  const AudioTrack bad{16000, 1, {}};
  for (const char* format : {"mp4", "gif"}) {
    CAPTURE(format);
    const auto out = dir.path() / (std::string("x") + extension_for(format));
    CHECK_THROWS_AS(encode_to_file(frames, &bad, out, {.format = format}), Error);
    CHECK(!fs::exists(out));
    CHECK(!fs::exists(fs::path(out).replace_extension(".wav")));
  }
}
