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

// Decodes the whole file (refused now, not when the job reaches its family) and records its hash.
VideoClip admit_one_video(boost::json::object& json, const std::string& field, const std::string& path, std::string& sha256,
                          const VideoLimits& limits) {
  auto clip = decode_video_file(path, field, limits);
  const std::string actual = video_file_sha256(path, field, limits);
  if (!sha256.empty() && sha256 != actual)
    throw_error(ErrorKind::invalid_argument, field + ": '" + path + "' no longer holds the video the job was accepted with (" +
                                                 field + "_sha256 differs)");
  sha256 = actual;
  json[field + "_sha256"] = actual;
  return clip;
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
  const auto control = admit_one_video(*object, "video", spec.video, spec.video_sha256, limits);
  if (spec.mask_video.empty()) return;
  // Wan VACE's mask: frame for frame and pixel for pixel over the control video (diffusers
  // refuses another length; another size would mask other pixels than it shows).
  const auto mask = admit_one_video(*object, "mask_video", spec.mask_video, spec.mask_video_sha256, limits);
  const auto shape = [](const VideoClip& c) {
    return std::to_string(c.frames) + " frames of " + std::to_string(c.header.width) + "x" + std::to_string(c.header.height);
  };
  if (mask.frames != control.frames || mask.header.width != control.header.width || mask.header.height != control.header.height)
    throw_error(ErrorKind::invalid_argument, "mask_video: " + shape(mask) + "; it must match the control video's " + shape(control));
}

void admit_reference_images(boost::json::value& json, JobSpec& spec, const ImageLimits& limits) {
  if (spec.reference_images.empty()) return;
  auto* object = json.if_object();
  if (object == nullptr) throw_error(ErrorKind::invalid_argument, "job: must be a JSON object");
  std::vector<std::string> hashes;
  for (std::size_t i = 0; i < spec.reference_images.size(); ++i) {
    const auto field = "reference_images[" + std::to_string(i) + "]";
    const std::string bytes = read_image_file(spec.reference_images[i], field, limits);
    decode_image(bytes, field, limits);
    hashes.push_back(image_sha256(bytes));
    if (i < spec.reference_images_sha256.size() && spec.reference_images_sha256[i] != hashes.back())
      throw_error(ErrorKind::invalid_argument, field + ": '" + spec.reference_images[i] +
                                                   "' no longer holds the image the job was accepted with (reference_images_sha256 differs)");
  }
  spec.reference_images_sha256 = hashes;
  (*object)["reference_images_sha256"] = boost::json::value_from(hashes);
}

}  // namespace vgen
