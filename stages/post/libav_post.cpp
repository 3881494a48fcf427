#include "stages/post/libav_post.hpp"

#include "runtime/errors.hpp"
#include "stages/media/libav.hpp"
#include "stages/post/post_process.hpp"

extern "C" {
#include <libavfilter/avfilter.h>
#include <libavfilter/buffersink.h>
#include <libavfilter/buffersrc.h>
#include <libavfilter/version_major.h>
#include <libavutil/opt.h>
#include <libavutil/rational.h>
}

#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace vgen {

namespace {

// libavfilter is loaded on first use (dlopen), not linked: its Debian build pulls in some thirty
// libraries (tesseract, flite voices, placebo, ...), 21 MiB of the GPU bundle, for a fallback
// only post-stage jobs use. Where it is missing, the fallback variants say so (unavailable())
// and a job asking for them is refused at validation, naming the field.
#define VGEN_AVFILTER_STR2(x) #x
#define VGEN_AVFILTER_STR(x) VGEN_AVFILTER_STR2(x)
constexpr const char* kAvfilterSoname = "libavfilter.so." VGEN_AVFILTER_STR(LIBAVFILTER_VERSION_MAJOR);

struct AvFilterLib {
  decltype(&::av_buffersink_get_frame) av_buffersink_get_frame = nullptr;
  decltype(&::av_buffersink_get_h) av_buffersink_get_h = nullptr;
  decltype(&::av_buffersink_get_time_base) av_buffersink_get_time_base = nullptr;
  decltype(&::av_buffersink_get_w) av_buffersink_get_w = nullptr;
  decltype(&::av_buffersrc_add_frame_flags) av_buffersrc_add_frame_flags = nullptr;
  decltype(&::avfilter_get_by_name) avfilter_get_by_name = nullptr;
  decltype(&::avfilter_graph_alloc) avfilter_graph_alloc = nullptr;
  decltype(&::avfilter_graph_config) avfilter_graph_config = nullptr;
  decltype(&::avfilter_graph_create_filter) avfilter_graph_create_filter = nullptr;
  decltype(&::avfilter_graph_free) avfilter_graph_free = nullptr;
  decltype(&::avfilter_graph_parse_ptr) avfilter_graph_parse_ptr = nullptr;
  decltype(&::avfilter_inout_alloc) avfilter_inout_alloc = nullptr;
  decltype(&::avfilter_inout_free) avfilter_inout_free = nullptr;
  std::string error;  // why it is not usable; empty when every function was found
};

const AvFilterLib& avfilter_lib() {
  static const AvFilterLib loaded = [] {
    AvFilterLib f;
    void* handle = dlopen(kAvfilterSoname, RTLD_NOW | RTLD_LOCAL);  // never closed: functions stay in use
    if (!handle) {
      const char* why = dlerror();
      f.error = std::string(kAvfilterSoname) + " could not be loaded (" + (why ? why : "?") +
                "); the no-model post-stages need it (Debian: apt-get install libavfilter" VGEN_AVFILTER_STR(LIBAVFILTER_VERSION_MAJOR) ")";
      return f;
    }
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (!fn && f.error.empty()) f.error = std::string(kAvfilterSoname) + " has no " + name;
    };
    load(f.av_buffersink_get_frame, "av_buffersink_get_frame");
    load(f.av_buffersink_get_h, "av_buffersink_get_h");
    load(f.av_buffersink_get_time_base, "av_buffersink_get_time_base");
    load(f.av_buffersink_get_w, "av_buffersink_get_w");
    load(f.av_buffersrc_add_frame_flags, "av_buffersrc_add_frame_flags");
    load(f.avfilter_get_by_name, "avfilter_get_by_name");
    load(f.avfilter_graph_alloc, "avfilter_graph_alloc");
    load(f.avfilter_graph_config, "avfilter_graph_config");
    load(f.avfilter_graph_create_filter, "avfilter_graph_create_filter");
    load(f.avfilter_graph_free, "avfilter_graph_free");
    load(f.avfilter_graph_parse_ptr, "avfilter_graph_parse_ptr");
    load(f.avfilter_inout_alloc, "avfilter_inout_alloc");
    load(f.avfilter_inout_free, "avfilter_inout_free");
    return f;
  }();
  return loaded;
}

// The loaded library, or Error(invalid_argument) saying why there is none.
const AvFilterLib& lib() {
  const auto& f = avfilter_lib();
  if (!f.error.empty()) throw_error(ErrorKind::invalid_argument, "post: " + f.error);
  return f;
}

struct GraphFree {
  void operator()(AVFilterGraph* g) const { lib().avfilter_graph_free(&g); }
};
using GraphPtr = std::unique_ptr<AVFilterGraph, GraphFree>;

void check_factor(int factor) {
  if (factor != 2 && factor != 4) throw_error(ErrorKind::invalid_argument, "post factor must be 2 or 4 (got " + std::to_string(factor) + ")");
}

// The clip's fps as the rational libav times it in (23.976 -> 2997/125).
AVRational rate_of(double fps) { return av_d2q(fps, 100000); }

// A source -> `filters` -> sink graph over rgb24 frames of the clip's size.
struct FilterGraph {
  GraphPtr graph;
  AVFilterContext* src = nullptr;
  AVFilterContext* sink = nullptr;

  FilterGraph(const VideoFrames& in, const std::string& filters) : graph(av::check_alloc(lib().avfilter_graph_alloc(), "avfilter_graph_alloc")) {
    graph->nb_threads = 1;  // the stage's pool decides the parallelism, not FFmpeg
    // Format conversions libavfilter inserts (RGB <-> YUV for minterpolate) round accurately.
    graph->scale_sws_opts = av_strdup("flags=lanczos+accurate_rnd+full_chroma_int");
    const AVRational rate = rate_of(in.fps);
    const std::string args = "video_size=" + std::to_string(in.width) + "x" + std::to_string(in.height) +
                             ":pix_fmt=" + std::to_string(AV_PIX_FMT_RGB24) + ":time_base=" + std::to_string(rate.den) + "/" +
                             std::to_string(rate.num) + ":pixel_aspect=1/1:frame_rate=" + std::to_string(rate.num) + "/" +
                             std::to_string(rate.den);
    av::check(lib().avfilter_graph_create_filter(&src, lib().avfilter_get_by_name("buffer"), "in", args.c_str(), nullptr, graph.get()),
              "post: buffer source");
    av::check(lib().avfilter_graph_create_filter(&sink, lib().avfilter_get_by_name("buffersink"), "out", nullptr, nullptr, graph.get()),
              "post: buffer sink");
    const enum AVPixelFormat rgb[] = {AV_PIX_FMT_RGB24, AV_PIX_FMT_NONE};
    av::check(av_opt_set_int_list(sink, "pix_fmts", rgb, AV_PIX_FMT_NONE, AV_OPT_SEARCH_CHILDREN), "post: sink format");
    AVFilterInOut* outputs = lib().avfilter_inout_alloc();
    AVFilterInOut* inputs = lib().avfilter_inout_alloc();
    outputs->name = av_strdup("in");
    outputs->filter_ctx = src;
    inputs->name = av_strdup("out");
    inputs->filter_ctx = sink;
    const int ret = lib().avfilter_graph_parse_ptr(graph.get(), filters.c_str(), &inputs, &outputs, nullptr);
    lib().avfilter_inout_free(&inputs);
    lib().avfilter_inout_free(&outputs);
    av::check(ret, "post: filter graph '" + filters + "'");
    av::check(lib().avfilter_graph_config(graph.get(), nullptr), "post: configuring '" + filters + "'");
  }

  void push(const VideoFrames& in, int f, std::int64_t pts) {
    av::FramePtr frame(av::check_alloc(av_frame_alloc(), "av_frame_alloc"));
    frame->format = AV_PIX_FMT_RGB24;
    frame->width = in.width;
    frame->height = in.height;
    frame->pts = pts;
    av::check(av_frame_get_buffer(frame.get(), 0), "post: frame buffer");
    const std::size_t row = static_cast<std::size_t>(in.width) * 3;
    for (int y = 0; y < in.height; ++y) std::memcpy(frame->data[0] + y * frame->linesize[0], in.frame(f) + y * row, row);
    av::check(lib().av_buffersrc_add_frame_flags(src, frame.get(), AV_BUFFERSRC_FLAG_KEEP_REF), "post: feeding a frame");
  }

  void finish() { av::check(lib().av_buffersrc_add_frame_flags(src, nullptr, 0), "post: end of input"); }

  // Every frame the graph has ready, each with its time in seconds.
  void pull(std::vector<std::pair<double, std::vector<std::uint8_t>>>& out) {
    av::FramePtr frame(av::check_alloc(av_frame_alloc(), "av_frame_alloc"));
    const AVRational tb = lib().av_buffersink_get_time_base(sink);
    for (;;) {
      const int ret = lib().av_buffersink_get_frame(sink, frame.get());
      if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return;
      av::check(ret, "post: reading a frame");
      const std::size_t row = static_cast<std::size_t>(frame->width) * 3;
      std::vector<std::uint8_t> rgb(row * frame->height);
      for (int y = 0; y < frame->height; ++y) std::memcpy(rgb.data() + y * row, frame->data[0] + y * frame->linesize[0], row);
      out.emplace_back(static_cast<double>(frame->pts) * av_q2d(tb), std::move(rgb));
      av_frame_unref(frame.get());
    }
  }

  int out_width() const { return lib().av_buffersink_get_w(sink); }
  int out_height() const { return lib().av_buffersink_get_h(sink); }
};

// Runs every frame of `in` through the graph (the last once more at the next time when
// `repeat_last`); the output frames with their times.
std::vector<std::pair<double, std::vector<std::uint8_t>>> run_graph(FilterGraph& g, const VideoFrames& in, bool repeat_last = false) {
  std::vector<std::pair<double, std::vector<std::uint8_t>>> out;
  for (int f = 0; f < in.count; ++f) {
    g.push(in, f, f);
    g.pull(out);
  }
  if (repeat_last) {
    g.push(in, in.count - 1, in.count);
    g.pull(out);
  }
  g.finish();
  g.pull(out);
  return out;
}

class Minterpolate final : public PostProcessor {
 public:
  PostKind kind() const override { return PostKind::interpolate; }
  std::string name() const override { return "minterpolate"; }
  std::string unavailable() const override { return avfilter_lib().error; }
  VideoFrames run(const VideoFrames& in, int factor, const std::string&) const override {
    auto out = interpolate_frames(in, factor);
    check_post_output(*this, in, factor, out);
    return out;
  }
};

class Lanczos final : public PostProcessor {
 public:
  PostKind kind() const override { return PostKind::upscale; }
  std::string name() const override { return "lanczos"; }
  std::string unavailable() const override { return avfilter_lib().error; }
  VideoFrames run(const VideoFrames& in, int factor, const std::string&) const override {
    auto out = upscale_frames(in, factor);
    check_post_output(*this, in, factor, out);
    return out;
  }
};

}  // namespace

VideoFrames interpolate_frames(const VideoFrames& in, int factor) {
  check_factor(factor);
  in.validate();
  const AVRational rate = rate_of(in.fps), out_rate = av_mul_q(rate, AVRational{factor, 1});
  VideoFrames out = VideoFrames::allocate(in.width, in.height, (in.count - 1) * factor + 1, in.fps * factor);
  if (in.count == 1) {
    std::memcpy(out.frame(0), in.frame(0), in.frame_bytes());
    return out;
  }
  // YUV 4:4:4: the least lossy format minterpolate takes (it has no RGB). It refuses frames
  // under 32 pixels a side: those are padded for it and cropped back.
  const int pw = std::max(in.width, 32), ph = std::max(in.height, 32);
  const bool pad = pw != in.width || ph != in.height;
  const std::string size = std::to_string(in.width) + ":" + std::to_string(in.height);
  FilterGraph g(in, "format=yuv444p," + (pad ? "pad=" + std::to_string(pw) + ":" + std::to_string(ph) + "," : std::string()) +
                        "minterpolate=fps=" + std::to_string(out_rate.num) + "/" + std::to_string(out_rate.den) +
                        ":mi_mode=mci:mc_mode=aobmc:me_mode=bidir:vsbmc=1," + (pad ? "crop=" + size + ":0:0," : std::string()) +
                        "format=rgb24");
  // minterpolate makes a gap's frames only once it has the frame after the gap's end: the last
  // input goes in twice, and what it makes after the last input's time is dropped below.
  auto frames = run_graph(g, in, /*repeat_last=*/true);
  // minterpolate stamps its frames on the output rate's grid; slot i is time i / out_fps.
  // Frames past the last input's time (a flush may repeat it) are not part of the clip.
  const double out_fps = av_q2d(out_rate);
  std::vector<bool> filled(out.count, false);
  for (const auto& [t, rgb] : frames) {
    const long slot = std::lround(t * out_fps);
    if (slot < 0 || slot >= out.count || filled[slot]) continue;
    std::memcpy(out.frame(static_cast<int>(slot)), rgb.data(), out.frame_bytes());
    filled[slot] = true;
  }
  // The last input ends the clip; a filter that stops before its time leaves it to us.
  if (!filled[out.count - 1]) {
    std::memcpy(out.frame(out.count - 1), in.frame(in.count - 1), in.frame_bytes());
    filled[out.count - 1] = true;
  }
  for (int i = 0; i < out.count; ++i)
    if (!filled[i])
      throw_error(ErrorKind::internal, "minterpolate left frame " + std::to_string(i) + " of " + std::to_string(out.count) +
                                           " empty (" + std::to_string(frames.size()) + " frames out)");
  return out;
}

VideoFrames upscale_frames(const VideoFrames& in, int factor) {
  check_factor(factor);
  in.validate();
  FilterGraph g(in, "scale=w=" + std::to_string(in.width * factor) + ":h=" + std::to_string(in.height * factor) +
                        ":flags=lanczos+accurate_rnd+full_chroma_int");
  const auto frames = run_graph(g, in);
  if (static_cast<int>(frames.size()) != in.count)
    throw_error(ErrorKind::internal, "scale made " + std::to_string(frames.size()) + " frames of " + std::to_string(in.count));
  VideoFrames out = VideoFrames::allocate(g.out_width(), g.out_height(), in.count, in.fps);
  for (int i = 0; i < in.count; ++i) std::memcpy(out.frame(i), frames[i].second.data(), out.frame_bytes());
  return out;
}

void register_libav_post() {
  static std::once_flag once;
  std::call_once(once, [] {
    post_processors().add("minterpolate", [](const PostOptions&) { return std::make_shared<const Minterpolate>(); });
    post_processors().add("lanczos", [](const PostOptions&) { return std::make_shared<const Lanczos>(); });
  });
}

}  // namespace vgen
