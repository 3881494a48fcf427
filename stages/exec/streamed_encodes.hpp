// StreamedEncodes: the model set's watched jobs encoded while they decode (issue 32 item 4),
// from the decode stage that starts each (stages/media/streamed_encode.hpp) to the encode stage
// that makes its file the job's:
//
//  decode   start(): the clip and its encoder on a thread of its own; only once that runs is the
//           job's FamilyJob::on_frames set, so a start that fails leaves nothing behind (the job
//           is then encoded whole). end_decode(): on_frames cleared (left set after a failed or
//           cancelled join, whose group may still read it: the ended encode takes nothing); the frames the family did
//           not hand over go in; the encode is kept for the job's encode stage, or (the decode
//           failed, the clip is short) ended. A job that ends before its encode stage (cancelled,
//           failed, shut down) aborts its kept encode: no file, the stream ends failed.
//  encode   finish(): commit, wait for the encode's end, the stream's end. The commit is final:
//           a cancel during the wait is too late and the job ends done with its file, as a job
//           encoded whole does (its encode runs to the end on a worker pool and the pipeline
//           calls a job whose last stage returned done). Aborting instead would make a cancel's
//           outcome depend on whether someone watched the job.
//
// Ownership: holds each kept encode until the job's encode stage takes it; entries of jobs that
// ended first (aborted, their threads done) go when the next encode is kept, so none is held
// unjoined for long. Thread-safety: every member may be called from any thread; each job's
// calls come in stage order. Blocking: start() starts a thread; ~StreamedEncodes joins the
// encodes still held (each stops at its next frame). Cancellation: end_decode's wait for an
// encode that failed ends early on a cancel (that encode stops on its own); finish()'s wait
// does not (above).
#pragma once

#include "stages/media/encode.hpp"

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace vgen {

class Job;              // runtime/job.hpp
struct FamilyJob;       // stages/families/family.hpp
class StreamedEncode;   // stages/media/streamed_encode.hpp
class LiveBroadcast;    // stages/media/live_broadcast.hpp

class StreamedEncodes {
 public:
  StreamedEncodes() = default;
  ~StreamedEncodes();
  StreamedEncodes(const StreamedEncodes&) = delete;
  StreamedEncodes& operator=(const StreamedEncodes&) = delete;

  // Starts encoding w's clip (w.spec's width, height, frames and fps; w.audio) into w.output
  // with `options` while it decodes, streaming to `live` (may be null), then sets w.on_frames.
  // Throws as the clip's allocation or the thread's start do; w.on_frames then stays empty.
  std::shared_ptr<StreamedEncode> start(FamilyJob& w, EncodeOptions options, std::shared_ptr<LiveBroadcast> live);
  // After `job`'s decode (`failed`: its exception, null when it went well; a failure here is
  // put there): w.on_frames cleared, and `streamed` (null: nothing else to do) kept for the
  // encode stage or ended (its stream failed) when the decode failed or the clip is short.
  boost::asio::awaitable<void> end_decode(Job& job, FamilyJob& w, std::shared_ptr<StreamedEncode> streamed,
                                          std::exception_ptr& failed);
  // The encode stage: false when `job` has no kept encode (encode it whole). Otherwise commits
  // it, waits for its end whatever cancels meanwhile, ends the stream (complete, or failed and
  // the encode's error rethrown) and returns true: the file is in place.
  boost::asio::awaitable<bool> finish(const Job& job);
  // Kept encodes now (tests).
  std::size_t size() const;

 private:
  void keep(const std::string& id, std::shared_ptr<StreamedEncode> streamed);
  std::shared_ptr<StreamedEncode> take(const std::string& id);

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<StreamedEncode>> by_job_;
};

}  // namespace vgen
