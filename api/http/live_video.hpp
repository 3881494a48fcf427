// The live switch of the video routes: GET /v1/jobs/{id}/video?live=1 and
// GET /v1/videos/{id}/content?live=1 answer a running job with its video as it is encoded:
// fragmented MP4 (stages/media/live_broadcast.hpp) with chunked transfer, so a player starts
// before the job ends. The response is sent at once; its first chunk waits (on the broadcast's
// event) for the init segment. A client gets everything written so far, then each fragment as
// it is written, then the end.
//   - The job ends done without having written the stream (a format that cannot stream, a
//     result-cache hit, a client that came after the encode started): the file is sent instead.
//   - The job fails or is cancelled: the stream ends cleanly (the terminating chunk) with what
//     it had.
//   - The stream was cut by a byte cap (stages/media/live_broadcast.hpp; live.max_total_bytes):
//     the connection closes without the terminating chunk, so the client sees an error (curl:
//     "transfer closed with outstanding read data"), and a warning is logged.
//   - A client that disconnects or cannot take a chunk within the server's write timeout is
//     dropped with a log line; the encoder never waits for any client.
//
// Thread-safety: stateless; the producer runs on its connection's strand.
// Cancellation: the producer's waits (the broadcast, the job's end) are cancelled with the
// connection (a client that goes away, a server stop).
#pragma once

#include "api/engine.hpp"
#include "api/http/http_response.hpp"

#include <optional>
#include <string_view>

namespace vgen::http {

// Whether a request target's query asks for the live stream: live=1 or live=true (0, false or
// absent: no). Error(invalid_argument) naming `live` for any other value.
bool wants_live(std::string_view target);

// The live response for `job`, or nullopt when there is nothing to stream live (the job has
// ended, its format writes a directory, or `jobs` runs no encoder here: the fleet): the route
// then answers as it does without live=1.
std::optional<Response> live_video_response(JobService& jobs, const JobHandle& job);

}  // namespace vgen::http
