#include "stages/media/streamed_encode.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <fstream>
#include <iterator>
#include <string>

#include "runtime/errors.hpp"
#include "stages/media/live_broadcast.hpp"

namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;
using namespace vgen;
using vgen::test::TempDir;
using vgen::test::listing;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A clip whose frames all differ (so a misplaced frame changes the bytes).
VideoFrames moving_clip(int count) {
  auto v = VideoFrames::allocate(48, 32, count, 8.0);
  for (int f = 0; f < count; ++f)
    for (std::size_t i = 0; i < v.frame_bytes(); ++i) v.frame(f)[i] = static_cast<std::uint8_t>((i * 7 + f * 31) & 0xff);
  return v;
}

// Waits for the encode's end on an io_context (as a stage does), then returns its error.
std::exception_ptr await_done(StreamedEncode& encode) {
  asio::io_context io;
  asio::co_spawn(io, encode.done().wait(asio::use_awaitable), asio::detached);
  io.run();
  return encode.error();
}

// The encode ended as cancelled, for the reason that names `why`.
void check_cancelled(const std::exception_ptr& error, const std::string& why) {
  REQUIRE(error != nullptr);
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::cancelled);
    CHECK(std::string(e.what()).find(why) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("streamed_encode: frames handed over in chunks give the bytes of encoding the whole clip, live stream included"
          * doctest::timeout(120)) {
  TempDir dir;
  const auto clip = moving_clip(17);
  EncodeOptions options;
  LiveBroadcast whole_live;
  encode_to_file(clip, nullptr, dir.path() / "whole.mp4", options, &whole_live);

  auto growing = std::make_shared<GrowingClip>(48, 32, 17, 8.0);
  auto live_ptr = std::make_shared<LiveBroadcast>();
  auto& live = *live_ptr;
  StreamedEncode encode(growing, nullptr, dir.path() / "streamed.mp4", options, live_ptr);
  // Chunks as Wan's decode makes them: 1 frame, then 4 at a time. The encoder waits on each
  // frame, so the first fragment can only be written once frames are there: no init segment yet
  // means nothing was encoded from unwritten frames.
  growing->append(clip.frame(0), 1);
  for (int f = 1; f < 17; f += 4) growing->append(clip.frame(f), 4);
  CHECK(growing->complete());
  encode.commit();
  REQUIRE(await_done(encode) == nullptr);
  CHECK(read_file(dir.path() / "streamed.mp4") == read_file(dir.path() / "whole.mp4"));
  std::string a, b;
  for (const auto& s : live.read_from(0).segments) a += *s;
  for (const auto& s : whole_live.read_from(0).segments) b += *s;
  CHECK(!a.empty());
  CHECK(a == b);
}

TEST_CASE("streamed_encode: the live stream has fragments before the clip is complete" * doctest::timeout(120)) {
  TempDir dir;
  const auto clip = moving_clip(33);
  EncodeOptions options;
  options.keyframe_interval_s = 0.5;
  auto growing = std::make_shared<GrowingClip>(48, 32, 33, 8.0);
  auto live_ptr = std::make_shared<LiveBroadcast>();
  auto& live = *live_ptr;
  StreamedEncode encode(growing, nullptr, dir.path() / "out.mp4", options, live_ptr);
  growing->append(clip.frame(0), 25);
  // Wait (on the broadcast's event, not a clock) for the stream to hold a fragment past the init
  // segment while 8 frames are still missing.
  asio::io_context io;
  bool fragment = false;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    for (std::size_t index = 0;;) {
      auto read = co_await live.next(index);
      for (const auto& s : read.segments) fragment |= s->find("mdat") != std::string::npos;
      index += read.segments.size();
      if (fragment || read.end != LiveBroadcast::End::open) co_return;
    }
  }, asio::detached);
  io.run();
  CHECK(fragment);
  CHECK_FALSE(growing->complete());
  CHECK_FALSE(fs::exists(dir.path() / "out.mp4"));
  growing->append(clip.frame(25), 8);
  encode.commit();
  REQUIRE(await_done(encode) == nullptr);
  CHECK(fs::exists(dir.path() / "out.mp4"));
}

TEST_CASE("streamed_encode: a failed clip ends the encode with cancelled and leaves no file" * doctest::timeout(120)) {
  TempDir dir;
  const auto clip = moving_clip(9);
  auto growing = std::make_shared<GrowingClip>(48, 32, 9, 8.0);
  StreamedEncode encode(growing, nullptr, dir.path() / "out.mp4", EncodeOptions{}, std::make_shared<LiveBroadcast>());
  growing->append(clip.frame(0), 5);
  growing->fail("decode failed");
  check_cancelled(await_done(encode), "decode failed");
  CHECK_FALSE(fs::exists(dir.path() / "out.mp4"));
  CHECK_FALSE(growing->append(clip.frame(5), 1));  // after fail: nothing written, nothing thrown
}

TEST_CASE("streamed_encode: an encoder that failed first lets the producer go on writing nothing" * doctest::timeout(120)) {
  TempDir dir;
  const auto clip = moving_clip(9);
  std::ofstream(dir.path() / "file") << "x";  // the output's folder is a file: the encoder fails at once
  auto growing = std::make_shared<GrowingClip>(48, 32, 9, 8.0);
  StreamedEncode encode(growing, nullptr, dir.path() / "file" / "out.mp4", EncodeOptions{}, std::make_shared<LiveBroadcast>());
  CHECK(await_done(encode) != nullptr);
  CHECK(growing->frames().rgb.empty());  // its frames were let go
  CHECK_FALSE(growing->append(clip.frame(0), 4));  // was a write into freed memory
  CHECK_FALSE(growing->append(clip.frame(4), 5));
  CHECK(growing->ready() == 0);
}

TEST_CASE("streamed_encode: the file is put in place only on commit; abort leaves nothing, whole clip or not" * doctest::timeout(120)) {
  TempDir dir;
  const auto clip = moving_clip(9);
  auto growing = std::make_shared<GrowingClip>(48, 32, 9, 8.0);
  StreamedEncode encode(growing, nullptr, dir.path() / "out.mp4", EncodeOptions{}, std::make_shared<LiveBroadcast>());
  REQUIRE(growing->append(clip.frame(0), 9));  // the whole clip: the encode runs to its end
  encode.abort("the job was cancelled");       // and waits for a word, which is abort
  encode.commit();                             // too late: the first word counts
  check_cancelled(await_done(encode), "the job was cancelled");
  CHECK(listing(dir.path()).empty());  // no file, no temporary
}

TEST_CASE("streamed_encode: frames past the end are refused; dropping the encode unfinished stops it" * doctest::timeout(120)) {
  TempDir dir;
  const auto clip = moving_clip(3);
  auto growing = std::make_shared<GrowingClip>(48, 32, 3, 8.0);
  CHECK_THROWS_AS(growing->append(clip.frame(0), 4), Error);
  {
    StreamedEncode encode(growing, nullptr, dir.path() / "out.mp4", EncodeOptions{}, nullptr);
    growing->append(clip.frame(0), 1);
  }  // the destructor fails the clip and joins: no hang (the test's timeout would say)
  CHECK_FALSE(fs::exists(dir.path() / "out.mp4"));
}
