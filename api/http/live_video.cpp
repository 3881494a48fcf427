#include "api/http/live_video.hpp"

#include "runtime/errors.hpp"
#include "stages/media/encode.hpp"
#include "stages/media/live_broadcast.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace vgen::http {
namespace {

using End = LiveBroadcast::End;

// The finished file, chunk by chunk (blocking reads on the strand, as the server's file bodies are).
asio::awaitable<void> send_file(const std::filesystem::path& path, const std::string& job, StreamWriter& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    spdlog::warn("live stream of job {}: cannot open {}", job, path.string());
    co_return;
  }
  std::string chunk(256 * 1024, '\0');
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto n = static_cast<std::size_t>(in.gcount());
    if (n == 0) break;
    const std::string_view piece(chunk.data(), n);  // a named local: GCC 12 and temporaries in co_await operands
    if (!co_await out.write(piece)) co_return;
  }
}

asio::awaitable<void> stream_live(std::shared_ptr<LiveBroadcast> live, JobHandle job, StreamWriter& out) {
  std::size_t sent = 0;
  End end = End::open;
  while (end == End::open) {
    const auto read = co_await live->next(sent);
    for (const auto& segment : read.segments) {
      if (!co_await out.write(*segment)) {
        spdlog::info("live stream of job {}: client dropped after {} segment(s) (gone, or slower than the write timeout)",
                     job.id(), sent);
        co_return;
      }
      ++sent;
    }
    end = read.end;  // read with the segments: none follows those just sent
  }
  if (end == End::truncated && sent > 0) {  // cut before any segment: the file below instead
    // A cap cut it (live.max_total_bytes, or one stream's own): no last chunk, so that the
    // client sees a broken response, never what looks like a whole video.
    spdlog::warn("live stream of job {}: cut by the live-stream byte cap after {} segment(s); ended without its last chunk",
                 job.id(), sent);
    throw_error(ErrorKind::overloaded, "live stream of job " + job.id() + " cut by the byte cap");
  }
  if (sent > 0) co_return;  // the stream as written; a failed job's ends here, cleanly
  // Nothing was written to this stream: the job ended first, or was encoded without it.
  const JobResult result = co_await job.async_wait();
  std::error_code ec;
  if (result.state == JobState::done && std::filesystem::is_regular_file(result.output, ec))
    co_await send_file(result.output, job.id(), out);
}

}  // namespace

bool wants_live(std::string_view target) {
  const auto query = parse_query(target);
  const auto it = query.find("live");
  if (it == query.end()) return false;
  if (it->second == "1" || it->second == "true") return true;
  if (it->second == "0" || it->second == "false") return false;
  throw_error(ErrorKind::invalid_argument, "live: must be 1, true, 0 or false");
}

std::optional<Response> live_video_response(JobService& jobs, const JobHandle& job) {
  if (job.finished()) return std::nullopt;
  const std::string format = job.result().spec.format;
  if (extension_for(format).empty()) return std::nullopt;  // a frame directory has no single body
  auto live = jobs.live_stream(job.id());
  if (!live) return std::nullopt;
  StreamResponse s;
  s.head.result(bhttp::status::ok);
  s.head.set(bhttp::field::content_type, content_type_for(format));
  s.head.set(bhttp::field::cache_control, "no-store");
  s.produce = [live, job](StreamWriter& out) { return stream_live(live, job, out); };
  return Response(std::move(s));
}

}  // namespace vgen::http
