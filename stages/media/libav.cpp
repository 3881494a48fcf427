#include "stages/media/libav.hpp"

#include "runtime/atomic_file.hpp"

namespace vgen::av {

std::string error_text(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  if (av_strerror(code, text, sizeof text) < 0 && text[0] == '\0') return "libav error " + std::to_string(code);
  return text;
}

ErrorKind error_kind(int code) noexcept {
  // AVERROR(e) is -e for system errors; libav's own codes are FFERRTAG values far outside
  // the errno range.
  const int errno_value = AVUNERROR(code);
  return errno_value > 0 && errno_value < 4096 ? io_error_kind(errno_value) : ErrorKind::internal;
}

int check(int ret, std::string_view what) {
  if (ret < 0) throw Error(error_kind(ret), std::string(what) + ": " + error_text(ret));
  return ret;
}

FramePtr alloc_frame() { return FramePtr(check_alloc(av_frame_alloc(), "allocating a frame")); }
PacketPtr alloc_packet() { return PacketPtr(check_alloc(av_packet_alloc(), "allocating a packet")); }

void Dictionary::set(const char* key, const char* value) {
  check(av_dict_set(&dict_, key, value, 0), std::string("setting option ") + key);
}

const char* Dictionary::get(const char* key) const {
  const AVDictionaryEntry* e = av_dict_get(dict_, key, nullptr, 0);
  return e != nullptr ? e->value : nullptr;
}

}  // namespace vgen::av
