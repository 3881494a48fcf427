// Owners and error checks for FFmpeg's C objects, shared by encode and probe.
//
// Each *Ptr is a std::unique_ptr whose deleter calls the matching libav free function, so an
// exception anywhere in an encode or a probe releases what was allocated. check_av turns a
// negative libav return into vgen::Error(kind, "<what>: <av error text>"), with the kind
// av_error_kind gives: transient for a system error a retry may fix (AVERROR(ENOSPC),
// AVERROR(EIO), ... as runtime/atomic_file's io_error_kind), internal for everything else.
//
// Thread-safety: stateless; each owner is as thread-safe as the libav object it holds (one
// thread at a time). Nothing here blocks except what the wrapped libav call does.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavformat/avio.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libswscale/swscale.h>
}

#include <memory>
#include <string>
#include <string_view>

#include "runtime/errors.hpp"

namespace vgen::av {

// av_strerror's text for a libav error code ("No space left on device", "Invalid data found
// when processing input"); a generic text for codes it does not know.
std::string error_text(int code);

// The ErrorKind of a libav error code: io_error_kind of the errno it wraps, else internal.
ErrorKind error_kind(int code) noexcept;

// Returns `ret` if it is >= 0, else throws Error(error_kind(ret), "<what>: <error_text(ret)>").
int check(int ret, std::string_view what);

// Returns `p`, or throws as check(AVERROR(ENOMEM), what) when it is null.
template <typename T>
T* check_alloc(T* p, std::string_view what) {
  if (p == nullptr) check(AVERROR(ENOMEM), what);
  return p;
}

struct OutputFormatFree {  // a muxer context: never closes pb, which its owner closes
  void operator()(AVFormatContext* c) const { avformat_free_context(c); }
};
struct InputFormatClose {  // a demuxer context from avformat_open_input
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecContextFree {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameFree {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketFree {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsFree {
  void operator()(SwsContext* c) const { sws_freeContext(c); }
};
struct FileIoClose {  // from avio_open; closing flushes (close it by hand to see the error)
  void operator()(AVIOContext* c) const { avio_closep(&c); }
};
struct CustomIoFree {  // from avio_alloc_context; frees the current buffer (libav may realloc it)
  void operator()(AVIOContext* c) const {
    av_freep(&c->buffer);
    avio_context_free(&c);
  }
};

using OutputFormatPtr = std::unique_ptr<AVFormatContext, OutputFormatFree>;
using InputFormatPtr = std::unique_ptr<AVFormatContext, InputFormatClose>;
using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextFree>;
using FramePtr = std::unique_ptr<AVFrame, FrameFree>;
using PacketPtr = std::unique_ptr<AVPacket, PacketFree>;
using SwsPtr = std::unique_ptr<SwsContext, SwsFree>;
using FileIoPtr = std::unique_ptr<AVIOContext, FileIoClose>;
using CustomIoPtr = std::unique_ptr<AVIOContext, CustomIoFree>;

// Allocation that throws (check_alloc) instead of returning null.
FramePtr alloc_frame();
PacketPtr alloc_packet();

// An AVDictionary of options; libav takes it as AVDictionary**, which unique_ptr cannot give.
class Dictionary {
 public:
  Dictionary() = default;
  Dictionary(const Dictionary&) = delete;
  Dictionary& operator=(const Dictionary&) = delete;
  ~Dictionary() { av_dict_free(&dict_); }
  void set(const char* key, const char* value);  // throws like check()
  const char* get(const char* key) const;        // nullptr if absent
  AVDictionary** address() { return &dict_; }

 private:
  AVDictionary* dict_ = nullptr;
};

}  // namespace vgen::av
