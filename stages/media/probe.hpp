// Probing an encoded video with libavformat/libavcodec: its codec, size, frame count (every
// packet is decoded, so a truncated or corrupt file fails) and the "comment" tag in which vgen
// records the job key (EncodeOptions::comment). `vgen batch` uses it to decide whether an
// existing output is complete and belongs to the job, instead of trusting its file name.
// A png output (a directory of frame_NNNNN.png) is probed frame by frame.
// Blocking: decodes the whole file on the calling thread (run it on a worker thread).
// Thread-safety: independent calls may run concurrently.
#pragma once

#include <filesystem>
#include <string>

namespace vgen {

struct VideoInfo {
  std::string codec;    // "h264", "vp9", "gif", "png"
  int width = 0, height = 0;
  int frames = 0;       // decoded frames
  std::string comment;  // container comment tag ("" if none)
};

// Throws Error(invalid_argument, "<path>: <what is wrong>") for a missing, truncated, corrupt
// or frameless file.
VideoInfo probe_video(const std::filesystem::path& path);

}  // namespace vgen
