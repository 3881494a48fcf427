// Uploads: the image and video files that HTTP clients send with a job (base64 in the JSON body or a
// multipart/form-data part), stored in <output_dir>/uploads/ under the SHA-256 of their bytes
// ("<sha256>.png|jpg|webp", a video "<sha256>.mp4|webm|..."), so the same picture sent twice is one file, and a job resumed
// after a crash (kill -9 included) finds its image again from the path its journal row keeps.
//
// When files go: each upload is pinned while a request stores it and while an unfinished job
// of this process uses it (pin/unpin counts). Unpinning the last use removes the file. At
// start-up, sweep() removes every upload that no unfinished (resumed) job pinned, which is
// what a crash left behind. Temporaries of an interrupted write are removed by the same sweep.
//
// Errors: the bytes are checked (size, format, dimensions, a full decode) before anything is
// written: Error(invalid_argument) naming the field. Writes go through runtime/atomic_file
// (its transient/internal kinds on a full disk or I/O error).
// Thread-safety: every member may be called from any thread (one mutex; the write happens
// under it, so two requests with the same picture never write it twice).
// Blocking: put() decodes and writes a file (fsync); run it off the io threads when it may be
// large. Cancellation: none.
//
// The upload fields of a job spec (image, last_image, video, mask_video, reference_images) are
// named here once: the readers below take their bytes out of a JSON spec or multipart parts, and
// with_upload_paths() puts the stored files' paths back. Pure functions, any thread.
#pragma once

#include "api/http/multipart.hpp"
#include "stages/media/image_input.hpp"
#include "stages/media/video_input.hpp"

#include <boost/json/object.hpp>

#include <atomic>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vgen {

// Upload bytes by spec field, in the order given (reference_images may come several times: one
// per picture, in order). Paths likewise, once stored.
using UploadBytes = std::vector<std::pair<std::string, std::string>>;
using UploadPaths = std::vector<std::pair<std::string, std::string>>;

// "video" and "mask_video" hold videos (UploadStore::put_video); every other upload field an image.
bool is_video_upload_field(std::string_view field);
// Whether a multipart part may carry a file for a job spec (image, last_image, video, mask_video,
// reference_images).
bool is_upload_field(std::string_view field);

// The files of a multipart job submission: every part named by an upload field, checked against
// max_image_bytes / max_video_bytes. Error(invalid_argument) naming the field when it is over
// size or also given in `spec` ("given twice"). Other parts are not looked at.
UploadBytes multipart_uploads(const boost::json::object& spec, const std::vector<MultipartPart>& parts,
                              std::uint64_t max_image_bytes, std::uint64_t max_video_bytes);
// The files inside a JSON job spec: each upload field holding a string is decoded
// (decode_image_text / decode_video_text), reference_images element by element (a non-string
// element refused as "reference_images[i]"); a field of another type is left to validation.
UploadBytes json_uploads(const boost::json::object& spec, std::uint64_t max_image_bytes, std::uint64_t max_video_bytes);
// `spec` with each field of `paths` set to its path; reference_images become an array of the
// paths in order (replacing what the field held).
boost::json::object with_upload_paths(boost::json::object spec, const UploadPaths& paths);

// The bytes of an image given as text in a JSON body: a data URL
// ("data:image/png;base64,....") or plain base64 (whitespace ignored, padding optional).
// Error(invalid_argument) naming `field` for anything else, for bytes that do not start like
// a PNG, JPEG or WebP file, or for a decoded size over max_bytes.
std::string decode_image_text(std::string_view text, std::string_view field, std::uint64_t max_bytes);
// The same for a video ("data:video/mp4;base64,..." or plain base64); what the bytes hold is
// checked when they are stored (UploadStore::put_video). A text that looks like a path is
// refused naming `field`.
std::string decode_video_text(std::string_view text, std::string_view field, std::uint64_t max_bytes);

class UploadStore {
 public:
  UploadStore(std::filesystem::path dir, ImageLimits limits, VideoLimits video_limits = {});

  // Checks `bytes` as an image (decode_image, naming `field`), writes it unless a file of
  // that content exists, pins it and returns its absolute path.
  std::filesystem::path put(std::string_view bytes, std::string_view field);
  // A video: the bytes are written to a temporary in dir(), decoded there in full against the
  // VideoLimits (decode_video_file, naming `field`; the temporary is removed on every error),
  // then renamed to "<sha256>.<ext>" (ext from the container: .mp4, .webm, ...) and pinned.
  std::filesystem::path put_video(std::string_view bytes, std::string_view field);
  // Marks one more use of an upload (a resumed job's file); paths outside dir() are ignored.
  void pin(const std::filesystem::path& file);
  // Ends one use; the last one removes the file. Paths outside dir() are ignored.
  void unpin(const std::filesystem::path& file);
  // Removes every upload (and temporary) that is not pinned; returns how many.
  std::size_t sweep();

  const std::filesystem::path& dir() const noexcept { return dir_; }
  std::size_t pinned(const std::filesystem::path& file) const;  // uses of one upload (tests)

 private:
  bool is_upload(const std::filesystem::path& file) const;

  std::filesystem::path dir_;
  ImageLimits limits_;
  VideoLimits video_limits_;
  std::atomic<std::uint64_t> temp_counter_{0};
  mutable std::mutex mutex_;
  std::map<std::filesystem::path, std::size_t> uses_;
};

}  // namespace vgen
