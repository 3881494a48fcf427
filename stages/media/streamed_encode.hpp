// Encoding a clip while it is decoded (issue 32 item 4: the live stream's first fragment leaves
// during decode, not after it).
//
// GrowingClip: a clip of known size whose frames are written in order by one producer (a
// family's chunked decode, on the compute thread) while one consumer (the encoder) reads those
// already there. The whole clip is allocated at once, as the encode stage's clip would be, so
// memory is what it was; the producer never waits.
// StreamedEncode: encode_to_file over a GrowingClip on a thread of its own, started before the
// decode: the encoder blocks on each frame until it is written. A thread of its own because
// it waits for another stage's work: a worker-pool thread (fibers, shared by every job's
// encodes) would be held idle for a whole decode.
//
// Thread-safety: every member may be called from any thread. Blocking: GrowingClip::wait_for
// blocks its caller (the encoder's thread); nothing else blocks, except ~StreamedEncode, which
// fails the clip if it is not complete and joins the thread (the encoder stops at its next
// frame). Cancellation: GrowingClip::fail ends the encode with an Error(cancelled) at the
// frame it waits for; the output is then not put in place (encode_to_file is atomic).
// The file is the job's only once its encode stage says so: the encoder writes a temporary
// beside the output (named as runtime/atomic_file names temporaries, so a crash's is swept) and
// waits for commit() to rename it into place; abort() (the job ended first: cancelled, failed)
// stops the encode at its next frame, whole clip or not, and removes the temporary.
#pragma once

#include "runtime/event.hpp"
#include "stages/media/audio_track.hpp"
#include "stages/media/encode.hpp"
#include "stages/media/frames.hpp"

#include <condition_variable>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace vgen {

// Called with a frame's index before the encoder reads it; blocks until that frame is written
// (frames arrive in order) and throws to abandon the encode. Empty: every frame is there.
using FrameWait = std::function<void(int frame)>;

// encode_to_file (stages/media/encode.hpp) for a clip whose frames are still being written:
// `wait` before each frame is read. With a live stream (mp4) the encoder takes each frame as it
// comes, so the stream's first fragments leave before the last frame exists; otherwise the
// whole clip is waited for first. The file is the same bytes either way. Defined in encode.cpp,
// beside the libav loop it drives.
void encode_to_file_as_frames_arrive(const VideoFrames& frames, const AudioTrack* audio, const std::filesystem::path& out,
                                     const EncodeOptions& options, LiveBroadcast* live, const FrameWait& wait);

class GrowingClip {
 public:
  // A black clip of `count` frames (VideoFrames::allocate; throws as it does), none ready.
  GrowingClip(int width, int height, int count, double fps);
  GrowingClip(const GrowingClip&) = delete;
  GrowingClip& operator=(const GrowingClip&) = delete;

  // Producer: `n` frames of RGB24 (n * frame_bytes bytes) after those already written. Returns
  // false, writing nothing, once the clip failed or the encoder let its frames go (it ended: a
  // producer never writes into freed frames). Error(internal) past the clip's end.
  bool append(const std::uint8_t* rgb, int n);
  // Producer: ends the clip unfinished (idempotent; no effect once complete). Wakes the waiter.
  void fail(const std::string& why);
  // Consumer: blocks until frame f is written; Error(cancelled, why) once failed first, or at
  // once after abort().
  void wait_for(int f) const;
  // Ends the clip for good, complete or not: every later wait_for throws. Idempotent.
  void abort(const std::string& why);

  int ready() const;
  bool complete() const;
  // Frees the frames' bytes (the sizes stay): once the encoder is done with them, so that a
  // StreamedEncode kept after its encode (a job that ends before its encode stage) holds none.
  void release_frames();
  // The frames; [0, ready()) are final, the rest are being written.
  const VideoFrames& frames() const noexcept { return frames_; }

 private:
  VideoFrames frames_;
  mutable std::mutex mutex_;
  mutable std::condition_variable grown_;
  int ready_ = 0;
  std::string failed_;  // non-empty once failed
  bool released_ = false;  // release_frames() ran: nothing may be written any more
  bool aborted_ = false;   // abort() ran: the encoder stops at its next frame
};

class StreamedEncode {
 public:
  // Starts encode_to_file_as_frames_arrive(clip->frames(), ..., wait for each frame) on a
  // new thread. `live` may be null (the file only); `audio` may be null (silent). The caller
  // ends `live` (it knows when the file is in place for the job). The clip's bytes are
  // released when the encode ends.
  StreamedEncode(std::shared_ptr<GrowingClip> clip, std::shared_ptr<const AudioTrack> audio, std::filesystem::path out,
                 EncodeOptions options, std::shared_ptr<LiveBroadcast> live);
  ~StreamedEncode();
  StreamedEncode(const StreamedEncode&) = delete;
  StreamedEncode& operator=(const StreamedEncode&) = delete;

  GrowingClip& clip() noexcept { return *clip_; }
  // The broadcast, while someone holds it: the encode until it ends, the job's LiveStreams
  // entry until the job ends. Null after both (nothing left to end).
  std::shared_ptr<LiveBroadcast> live() const { return live_.lock(); }
  // Set once the encode has ended, well or not (then error() says how).
  AsyncEvent& done() noexcept { return done_; }
  // After done(): null when the file is in place, else the encode's exception.
  std::exception_ptr error() const;
  // The encode stage's word: put the file in place once encoded (commit), or never (abort: the
  // job ended without its encode stage). The first word counts; abort after commit does nothing.
  void commit();
  void abort(const std::string& why);
  // Aborted and its thread's work over: nothing left to wait for, cheap to destroy.
  bool abandoned() const;

 private:
  std::shared_ptr<GrowingClip> clip_;
  std::weak_ptr<LiveBroadcast> live_;
  AsyncEvent done_;
  mutable std::mutex mutex_;
  std::exception_ptr error_;
  std::condition_variable word_given_;
  enum class Word { none, commit, abort } word_ = Word::none;  // under mutex_
  bool ended_ = false;                                          // under mutex_: the thread's work is over
  std::string abort_why_;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace vgen
