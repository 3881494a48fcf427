// Admission of a job's images and video: before a job is accepted, each image file its spec names is
// read, checked against ImageLimits and decoded in full (a truncated or corrupt file is
// refused here, before anything is queued or written), and the SHA-256 of its bytes is put
// into the spec ("image_sha256", "last_image_sha256") so that the job's content key follows
// the picture, not the path. A spec that carries a hash already (a job resumed from the
// journal) must still find those bytes: a file that changed or vanished is refused.
//
// Errors: Error(invalid_argument) naming the field ("image: ...", "last_image: ...").
// Blocking: reads and decodes the files on the calling thread (bounded by the limits). A
// 1024x1024 picture decoded in 7 ms (PNG), 19 ms (JPEG), 43 ms (WebP), best of 5 on the loaded
// 2-core build VM. Thread-safety: a pure function of its arguments and the files.
// Cancellation: none.
#pragma once

#include "stages/media/image_input.hpp"
#include "stages/media/video_input.hpp"
#include "stages/job_spec.hpp"

#include <boost/json/value.hpp>

namespace vgen {

// `json`: the spec as submitted (an object; gains the *_sha256 fields); `spec`: the same spec
// parsed (its *_sha256 fields are set to match).
void admit_images(boost::json::value& json, JobSpec& spec, const ImageLimits& limits = {});

// The same for a video-to-video job's "video": the file is checked against VideoLimits and
// decoded in full (decode_video_file, no frame kept), and "video_sha256" is set to its bytes'
// SHA-256. A 1,025-frame limit bounds the time; a spec without a video is left as it is.
// With a Wan VACE "mask_video" as well: the mask is admitted the same way ("mask_video_sha256")
// and must have the control video's frame count and size (refused naming "mask_video").
void admit_video(boost::json::value& json, JobSpec& spec, const VideoLimits& limits = {});

// Wan VACE's "reference_images": each admitted as an image ("reference_images[i]: ..." on a
// refusal) and "reference_images_sha256" set to their hashes, in order.
void admit_reference_images(boost::json::value& json, JobSpec& spec, const ImageLimits& limits = {});

}  // namespace vgen
