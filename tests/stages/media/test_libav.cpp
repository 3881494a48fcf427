// The libav owners and error checks that encode and probe share.
#include "stages/media/libav.hpp"

#include <doctest/doctest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using vgen::Error;
using vgen::ErrorKind;
namespace av = vgen::av;

namespace {

struct Failure {
  ErrorKind kind = ErrorKind::internal;
  std::string message;
  bool thrown = false;
};
template <class F>
Failure failure_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.kind(), e.what(), true};
  }
  return {};
}

}  // namespace

TEST_CASE("error text and kind: system errors a retry may fix are transient") {
  CHECK(av::error_text(AVERROR(ENOSPC)) == "No space left on device");
  CHECK(av::error_text(AVERROR_INVALIDDATA).find("Invalid data") != std::string::npos);
  CHECK_FALSE(av::error_text(-123456789).empty());
  CHECK(av::error_kind(AVERROR(ENOSPC)) == ErrorKind::transient);
  CHECK(av::error_kind(AVERROR(EIO)) == ErrorKind::transient);
  CHECK(av::error_kind(AVERROR(ENAMETOOLONG)) == ErrorKind::internal);
  CHECK(av::error_kind(AVERROR(EINVAL)) == ErrorKind::internal);
  CHECK(av::error_kind(AVERROR_INVALIDDATA) == ErrorKind::internal);
  CHECK(av::error_kind(AVERROR_EOF) == ErrorKind::internal);
}

TEST_CASE("check passes results through and throws for negative ones, naming the step") {
  CHECK(av::check(0, "x") == 0);
  CHECK(av::check(42, "x") == 42);
  const auto full = failure_of([] { av::check(AVERROR(ENOSPC), "writing a packet"); });
  CHECK(full.kind == ErrorKind::transient);
  CHECK(full.message == "writing a packet: No space left on device");
  const auto bad = failure_of([] { av::check(AVERROR_INVALIDDATA, "opening x"); });
  CHECK(bad.kind == ErrorKind::internal);
  CHECK(bad.message.starts_with("opening x: "));
  int value = 7;
  CHECK(av::check_alloc(&value, "ok") == &value);
  const auto null = failure_of([] { av::check_alloc(static_cast<AVFrame*>(nullptr), "allocating a frame"); });
  CHECK(null.thrown);
  CHECK(null.message.starts_with("allocating a frame: "));
}

TEST_CASE("owners hold working objects") {
  av::FramePtr frame = av::alloc_frame();
  frame->format = AV_PIX_FMT_RGB24;
  frame->width = 8;
  frame->height = 4;
  av::check(av_frame_get_buffer(frame.get(), 0), "frame buffers");
  CHECK(frame->data[0] != nullptr);
  av::PacketPtr packet = av::alloc_packet();
  CHECK(packet->size == 0);
  av::SwsPtr sws(sws_getContext(8, 4, AV_PIX_FMT_RGB24, 8, 4, AV_PIX_FMT_YUV420P, SWS_BILINEAR, nullptr, nullptr, nullptr));
  CHECK(sws != nullptr);
  const AVCodec* gif = avcodec_find_encoder_by_name("gif");
  REQUIRE(gif != nullptr);
  av::CodecContextPtr codec(avcodec_alloc_context3(gif));
  CHECK(codec != nullptr);
  AVFormatContext* raw = nullptr;
  av::check(avformat_alloc_output_context2(&raw, nullptr, "gif", nullptr), "muxer");
  av::OutputFormatPtr muxer(raw);
  CHECK(muxer->oformat != nullptr);

  av::Dictionary options;
  options.set("movflags", "+faststart");
  CHECK(std::string(options.get("movflags")) == "+faststart");
  CHECK(options.get("missing") == nullptr);
  CHECK(*options.address() != nullptr);
}

TEST_CASE("a file AVIO owner flushes and closes the file; an input owner opens what it names") {
  std::random_device random;
  const fs::path file = fs::temp_directory_path() / ("vgen-test-libav-" + std::to_string(random()));
  {
    AVIOContext* pb = nullptr;
    av::check(avio_open(&pb, file.c_str(), AVIO_FLAG_WRITE), "opening");
    av::FileIoPtr io(pb);
    avio_write(io.get(), reinterpret_cast<const unsigned char*>("hello"), 5);
  }  // the deleter flushes: the bytes are in the file
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == "hello");

  AVFormatContext* raw = nullptr;
  const int opened = avformat_open_input(&raw, file.c_str(), nullptr, nullptr);
  av::InputFormatPtr input(raw);  // null when "hello" is no known format: both are fine
  CHECK((opened < 0) == (input == nullptr));
  fs::remove(file);
}

TEST_CASE("a custom AVIO owner frees the buffer libav holds") {
  constexpr int size = 4096;
  auto* buffer = static_cast<unsigned char*>(av::check_alloc(av_malloc(size), "buffer"));
  av::CustomIoPtr io(av::check_alloc(avio_alloc_context(buffer, size, 1, nullptr, nullptr, nullptr, nullptr), "avio"));
  CHECK(io->buffer == buffer);
}
