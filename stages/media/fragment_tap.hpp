// FragmentTap: the packets an encoder makes for a file, muxed a second time as fragmented MP4
// (frag_keyframe+empty_moov+default_base_moof, plus a fragment at least every fragment_s of
// video) into a LiveBroadcast: the init segment (ftyp+moov) when the tap opens, then each
// fragment (moof+mdat) as the muxer closes it, so a client can play the video while the rest is
// encoded. The packets are copied: what the file's muxer gets is unchanged, byte for byte.
// With a job's sound (an audio encoder given) the stream has two tracks, video then audio, as
// the file has: the packets of both are interleaved by time (av_interleaved_write_frame), so
// each fragment carries the video and the sound of the same stretch of the clip.
//
// Failure: a tap never fails the encode. A libav error ends the broadcast (failed), logs once,
// and the tap ignores every later packet; the file is written as if there were no tap.
// Thread-safety: one tap belongs to one encode (one thread). Blocking: never waits on readers
// (LiveBroadcast::append does not wait); only the muxing itself costs time (a copy of each packet).
#pragma once

#include "stages/media/live_broadcast.hpp"

#include <memory>

extern "C" {
struct AVCodecContext;
struct AVPacket;
}

namespace vgen {

class FragmentTap {
 public:
  // `codec`: the opened video encoder, whose parameters (and global header) the stream takes;
  // `audio`: the opened audio encoder (track 2), or null for a silent stream. Writes the init
  // segment at once. `out` must outlive the tap.
  FragmentTap(const AVCodecContext* codec, LiveBroadcast& out, double fragment_s = 0.5);
  FragmentTap(const AVCodecContext* codec, const AVCodecContext* audio, LiveBroadcast& out, double fragment_s = 0.5);
  ~FragmentTap();
  FragmentTap(const FragmentTap&) = delete;
  FragmentTap& operator=(const FragmentTap&) = delete;

  // A copy of `packet` (timestamps in the video codec's time base) into the stream; `packet` is
  // not changed.
  void write(const AVPacket* packet);
  // The same for a packet of the audio encoder (its time base); ignored by a silent tap.
  void write_audio(const AVPacket* packet);
  // Writes the last fragment. The broadcast stays open: its owner ends it once the file is in place.
  void finish();
  bool ok() const noexcept;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace vgen
