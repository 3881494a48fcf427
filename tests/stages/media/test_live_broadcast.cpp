#include "stages/media/live_broadcast.hpp"

#include "tests/support/async_test.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <string>
#include <thread>

namespace asio = boost::asio;
using vgen::LiveBroadcast;
using vgen::LiveStreams;
using End = LiveBroadcast::End;

namespace {

// Everything a reader gets from `index` on until the end, as one string.
asio::awaitable<std::string> read_all(LiveBroadcast& b, std::size_t index = 0) {
  std::string out;
  while (true) {
    auto r = co_await b.next(index);
    for (const auto& s : r.segments) out += *s;
    index += r.segments.size();
    if (r.end != End::open && index >= b.read_from(0).segments.size()) co_return out;
  }
}

}  // namespace

TEST_CASE("a reader that joins late gets every segment from the start, then each new one" * doctest::timeout(30)) {
  LiveBroadcast b;
  CHECK_FALSE(b.started());
  CHECK(b.append("init;"));
  CHECK(b.append(""));  // ignored
  CHECK(b.append("f1;"));
  CHECK(b.started());
  CHECK(b.read_from(0).segments.size() == 2);
  CHECK(b.read_from(5).segments.empty());
  vgen::test::run_async([&](asio::io_context&) -> asio::awaitable<void> {
    auto first = co_await b.next(0);  // two there already: no wait
    REQUIRE(first.segments.size() == 2);
    CHECK(first.end == End::open);
    // The writer runs on another thread, as the encoder does; the reader waits on the event.
    std::thread writer([&] {
      b.append("f2;");
      b.append("f3;");
      b.finish(End::complete);
    });
    const std::string rest = co_await read_all(b, 2);
    writer.join();
    CHECK(rest == "f2;f3;");
  });
  CHECK(b.end() == End::complete);
  CHECK_FALSE(b.append("late"));  // ended: nothing more
  b.finish(End::failed);          // the first end stays
  CHECK(b.end() == End::complete);
  CHECK(b.bytes() == std::string("init;f1;f2;f3;").size());
}

TEST_CASE("many readers on several threads each get every byte, in order, while the writer never waits" * doctest::timeout(60)) {
  for (int threads : {1, 4}) {
    LiveBroadcast b;
    std::string expected;
    for (int i = 0; i < 400; ++i) expected += "segment " + std::to_string(i) + ";";
    std::atomic<int> good{0};
    vgen::test::run_async([&](asio::io_context& io) -> asio::awaitable<void> {
      constexpr int readers = 8;
      std::atomic<int> done{0};
      vgen::AsyncEvent all_done;
      for (int r = 0; r < readers; ++r) {
        auto strand = asio::make_strand(io);
        asio::co_spawn(strand, read_all(b), [&](std::exception_ptr e, std::string got) {
          if (!e && got == expected) ++good;
          if (++done == readers) all_done.set();
        });
      }
      std::thread writer([&] {
        for (int i = 0; i < 400; ++i) CHECK(b.append("segment " + std::to_string(i) + ";"));
        b.finish(End::complete);
      });
      co_await all_done.wait();
      writer.join();
    }, vgen::test::default_timeout, threads);
    CHECK(good == 8);
  }
}

TEST_CASE("past max_bytes the broadcast ends truncated and keeps what it had") {
  LiveBroadcast b(10);
  CHECK(b.append("12345"));
  CHECK_FALSE(b.append("123456"));  // 11 > 10
  CHECK(b.end() == End::truncated);
  CHECK(b.bytes() == 5);
  const auto r = b.read_from(0);
  REQUIRE(r.segments.size() == 1);
  CHECK(*r.segments[0] == "12345");
  CHECK(r.end == End::truncated);
  b.finish(End::complete);  // the encoder's end afterwards does not hide the cut
  CHECK(b.end() == End::truncated);
}

TEST_CASE("the streams share one budget: a broadcast past it ends truncated, and its bytes come back when it goes") {
  LiveStreams streams(/*max_bytes=*/100, /*total_bytes=*/12);
  auto a = streams.start("a");
  CHECK(a == nullptr);  // nobody watches a: nothing written
  a = streams.open("a");
  auto b = streams.open("b");
  CHECK(streams.start("a") == a);
  CHECK(a->append("12345678"));  // 8 of 12
  CHECK(streams.budget().used() == 8);
  CHECK_FALSE(b->append("12345"));  // 13 > 12, although b alone is far below its own 100
  CHECK(b->end() == End::truncated);
  CHECK(b->bytes() == 0);
  CHECK(streams.budget().used() == 8);  // the refused segment took nothing
  streams.close("a");
  a.reset();  // the last holder: its 8 bytes are free again
  CHECK(streams.budget().used() == 0);
  auto c = streams.open("c");
  CHECK(c->append("123456789012"));  // exactly the budget
  CHECK(c->end() == End::open);
}

TEST_CASE("a waiting reader is cancellable and leaves the broadcast as it was" * doctest::timeout(30)) {
  LiveBroadcast b;
  b.append("init");
  vgen::test::run_async([&](asio::io_context& io) -> asio::awaitable<void> {
    asio::cancellation_signal cancel;
    vgen::AsyncEvent ended;
    boost::system::error_code seen;
    asio::co_spawn(io, b.next(1), asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, LiveBroadcast::Read) {
      try {
        if (e) std::rethrow_exception(e);
      } catch (const boost::system::system_error& error) {
        seen = error.code();
      }
      ended.set();
    }));
    // Emitted on the io_context's one thread, after the reader has suspended (posted behind it).
    co_await asio::post(io, asio::use_awaitable);
    cancel.emit(asio::cancellation_type::terminal);
    co_await ended.wait();
    CHECK(seen == asio::error::operation_aborted);
  });
  CHECK(b.append("f1"));  // the writer is unaffected
  CHECK(b.read_from(0).segments.size() == 2);
}

TEST_CASE("LiveStreams: start is null unless a reader opened one; open meets the writer, start replaces a used broadcast, close ends and forgets") {
  LiveStreams streams;
  CHECK(streams.start("job-0") == nullptr);  // nobody watches: no broadcast, nothing kept
  CHECK(streams.size() == 0);
  auto reader_side = streams.open("job-1");
  auto writer_side = streams.start("job-1");
  CHECK(reader_side == writer_side);  // a reader that came first gets the writer's bytes
  CHECK(streams.open("job-1") == writer_side);
  writer_side->append("first encode");

  auto again = streams.start("job-1");  // the encode runs again
  CHECK(again != writer_side);
  CHECK(writer_side->end() == End::failed);  // its readers end; they never see two encodes mixed
  CHECK(again->end() == End::open);
  again->append("second");
  again->finish(End::complete);

  streams.close("job-1");
  CHECK(streams.size() == 0);
  CHECK(again->end() == End::complete);  // a completed stream stays complete
  auto unwritten = streams.open("job-2");
  streams.close("job-2");
  CHECK(unwritten->end() == End::failed);  // a job that ended before any byte: its readers end
  streams.close("nobody");                 // no-op
}
