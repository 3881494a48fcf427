#include "stages/media/image_admission.hpp"

#include "runtime/errors.hpp"

#include <boost/json.hpp>

namespace vgen {

namespace {

void admit_one(boost::json::object& json, const std::string& field, const std::string& path, std::string& sha256,
               const ImageLimits& limits) {
  if (path.empty()) return;
  const std::string bytes = read_image_file(path, field, limits);
  decode_image(bytes, field, limits);  // refused now, not when the job reaches its family
  const std::string actual = image_sha256(bytes);
  if (!sha256.empty() && sha256 != actual)
    throw_error(ErrorKind::invalid_argument, field + ": '" + path + "' no longer holds the image the job was accepted with (" +
                                                 field + "_sha256 differs)");
  sha256 = actual;
  json[field + "_sha256"] = actual;
}

}  // namespace

void admit_images(boost::json::value& json, JobSpec& spec, const ImageLimits& limits) {
  if (spec.image.empty() && spec.last_image.empty()) return;
  auto* object = json.if_object();
  if (object == nullptr) throw_error(ErrorKind::invalid_argument, "job: must be a JSON object");
  admit_one(*object, "image", spec.image, spec.image_sha256, limits);
  admit_one(*object, "last_image", spec.last_image, spec.last_image_sha256, limits);
}

void admit_video(boost::json::value& json, JobSpec& spec, const VideoLimits& limits) {
  if (spec.video.empty()) return;
  auto* object = json.if_object();
  if (object == nullptr) throw_error(ErrorKind::invalid_argument, "job: must be a JSON object");
  decode_video_file(spec.video, "video", limits);  // refused now, not when the job reaches its family
  const std::string actual = video_file_sha256(spec.video, "video", limits);
  if (!spec.video_sha256.empty() && spec.video_sha256 != actual)
    throw_error(ErrorKind::invalid_argument, "video: '" + spec.video +
                                                 "' no longer holds the video the job was accepted with (video_sha256 differs)");
  spec.video_sha256 = actual;
  (*object)["video_sha256"] = actual;
}

}  // namespace vgen
