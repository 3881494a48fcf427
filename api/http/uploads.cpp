#include "api/http/uploads.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/errors.hpp"

#include "runtime/content_key.hpp"

#include <boost/json/array.hpp>

#include <unistd.h>

#include <array>

namespace vgen {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void bad(std::string_view field, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, std::string(field) + ": " + what);
}

// 0-63 for the base64 alphabet (RFC 4648 section 4, and the URL-safe '-' '_'), -1 otherwise.
int sextet(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

std::string_view extension_of(ImageFormat f) {
  switch (f) {
    case ImageFormat::png: return ".png";
    case ImageFormat::jpeg: return ".jpg";
    case ImageFormat::webp: return ".webp";
  }
  return ".img";
}

}  // namespace

namespace {

// The bytes of base64 text or a base64 data URL, refused past max_bytes (`what` names the
// expected content in messages: "image", "video").
std::string decode_base64_text(std::string_view text, std::string_view field, std::uint64_t max_bytes, std::string_view what) {
  const std::string kind(what);
  if (text.starts_with("data:")) {
    const auto comma = text.find(',');
    if (comma == std::string_view::npos) bad(field, "a data URL without ','");
    const auto meta = text.substr(5, comma - 5);
    if (!meta.ends_with(";base64")) bad(field, "a data URL must be base64 (\"data:" + kind + "/...;base64,...\")");
    text.remove_prefix(comma + 1);
  }
  if (text.size() / 4 * 3 > max_bytes + 3)
    bad(field, "larger than " + std::to_string(max_bytes) + " bytes (about " + std::to_string(text.size() / 4 * 3) + " as base64)");
  std::string out;
  out.reserve(text.size() / 4 * 3 + 3);
  std::uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    const int v = sextet(c);
    if (v < 0 || padding) bad(field, "not base64 " + kind + " data (nor a data URL); HTTP jobs send the " + kind + " itself, not a path");
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (bits >= 6) bad(field, "base64 data ends in the middle of a byte");
  if (out.size() > max_bytes) bad(field, "larger than " + std::to_string(max_bytes) + " bytes (got " + std::to_string(out.size()) + ")");
  return out;
}

}  // namespace

std::string decode_image_text(std::string_view text, std::string_view field, std::uint64_t max_bytes) {
  std::string out = decode_base64_text(text, field, max_bytes, "image");
  // '/' and letters are base64 too, so a path decodes to bytes: say what was expected.
  const bool image = out.starts_with("\x89PNG") || out.starts_with("\xFF\xD8\xFF") ||
                     (out.size() >= 12 && out.starts_with("RIFF") && out.substr(8, 4) == "WEBP");
  if (!image)
    bad(field, "not base64 of a PNG, JPEG or WebP image (nor a data URL of one); HTTP jobs send the image itself, not a path");
  return out;
}

std::string decode_video_text(std::string_view text, std::string_view field, std::uint64_t max_bytes) {
  // '/' and letters are base64 too: a path would decode to bytes that then fail as a video.
  if (text.starts_with("/") || text.starts_with("./") || text.starts_with("file:"))
    bad(field, "HTTP jobs send the video itself (base64, a data URL or a multipart file part), not a path");
  return decode_base64_text(text, field, max_bytes, "video");
}

UploadStore::UploadStore(fs::path dir, ImageLimits limits, VideoLimits video_limits)
    : dir_(fs::absolute(std::move(dir)).lexically_normal()), limits_(limits), video_limits_(video_limits) {}

bool UploadStore::is_upload(const fs::path& file) const {
  return file.parent_path() == dir_ && file.has_filename();
}

fs::path UploadStore::put(std::string_view bytes, std::string_view field) {
  const auto header = read_image_header(bytes, field, limits_);
  decode_image(bytes, field, limits_);  // refused before anything is written
  const fs::path file = dir_ / (image_sha256(bytes) + std::string(extension_of(header.format)));
  std::lock_guard lock(mutex_);
  std::error_code ec;
  if (!(fs::is_regular_file(file, ec) && fs::file_size(file, ec) == bytes.size())) {
    fs::create_directories(dir_, ec);
    if (ec) throw_error(io_error_kind(ec.value()), "uploads: cannot create '" + dir_.string() + "': " + ec.message());
    write_file_atomically(file, bytes);
  }
  ++uses_[file];
  return file;
}

fs::path UploadStore::put_video(std::string_view bytes, std::string_view field) {
  if (bytes.empty()) bad(field, "empty (0 bytes)");
  if (bytes.size() > video_limits_.max_bytes)
    bad(field, "larger than " + std::to_string(video_limits_.max_bytes) + " bytes (got " + std::to_string(bytes.size()) + ")");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw_error(io_error_kind(ec.value()), "uploads: cannot create '" + dir_.string() + "': " + ec.message());
  // libav reads files: the bytes go to a temporary of their own, checked there, and are
  // renamed to their content's name only once they decode. Every failure removes it; a crash
  // leaves it to the next start's sweep() (no job pins it).
  const fs::path temp = dir_ / (".video-" + std::to_string(++temp_counter_) + "-" + std::to_string(::getpid()) + ".part");
  struct RemoveUnlessKept {
    const fs::path& path;
    bool kept = false;
    ~RemoveUnlessKept() {
      std::error_code ignored;
      if (!kept) fs::remove(path, ignored);
    }
  } guard{temp};
  write_file_atomically(temp, bytes);
  VideoHeader header;
  try {
    header = decode_video_file(temp, field, video_limits_).header;
  } catch (const Error& e) {
    // The temporary's path means nothing to the client: call it the upload.
    std::string what = e.what();
    const std::string shown = "'" + temp.string() + "'";
    for (auto at = what.find(shown); at != std::string::npos; at = what.find(shown)) what.replace(at, shown.size(), "the upload");
    throw Error(e.kind(), what);
  }
  const fs::path file = dir_ / (content_key_bytes(bytes).hex() + std::string(video_extension(header)));
  std::lock_guard lock(mutex_);
  if (!(fs::is_regular_file(file, ec) && fs::file_size(file, ec) == bytes.size())) {
    fs::rename(temp, file, ec);
    if (ec) throw_error(io_error_kind(ec.value()), "uploads: cannot store '" + file.string() + "': " + ec.message());
    guard.kept = true;
  }
  ++uses_[file];
  return file;
}

void UploadStore::pin(const fs::path& file) {
  const auto f = file.lexically_normal();
  if (!is_upload(f)) return;
  std::lock_guard lock(mutex_);
  ++uses_[f];
}

void UploadStore::unpin(const fs::path& file) {
  const auto f = file.lexically_normal();
  if (!is_upload(f)) return;
  std::lock_guard lock(mutex_);
  const auto it = uses_.find(f);
  if (it == uses_.end()) return;
  if (--it->second > 0) return;
  uses_.erase(it);
  std::error_code ignored;
  fs::remove(f, ignored);
}

std::size_t UploadStore::sweep() {
  std::lock_guard lock(mutex_);
  std::size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const auto& path = it->path();
    if (uses_.count(path) || !it->is_regular_file(ec)) continue;
    std::error_code ignored;
    if (fs::remove(path, ignored)) ++removed;
  }
  return removed;
}

std::size_t UploadStore::pinned(const fs::path& file) const {
  std::lock_guard lock(mutex_);
  const auto it = uses_.find(file.lexically_normal());
  return it == uses_.end() ? 0 : it->second;
}

namespace {

constexpr const char* kImageFields[] = {"image", "last_image"};
constexpr const char* kVideoFields[] = {"video", "mask_video"};  // a video to follow, a control video's mask (issue 34)
// Reference images (issue 34): uploads like the images, several of them (an array in JSON,
// repeated parts in multipart).
constexpr const char* kReferenceField = "reference_images";

void check_size(std::string_view field, std::size_t size, std::uint64_t max_bytes) {
  if (size > max_bytes) bad(field, "larger than " + std::to_string(max_bytes) + " bytes (got " + std::to_string(size) + ")");
}

}  // namespace

bool is_video_upload_field(std::string_view field) { return field == kVideoFields[0] || field == kVideoFields[1]; }

bool is_upload_field(std::string_view field) {
  return field == kImageFields[0] || field == kImageFields[1] || is_video_upload_field(field) || field == kReferenceField;
}

UploadBytes multipart_uploads(const boost::json::object& spec, const std::vector<MultipartPart>& parts,
                              std::uint64_t max_image_bytes, std::uint64_t max_video_bytes) {
  UploadBytes files;
  auto take = [&](const char* field, std::uint64_t max_bytes) {
    const auto* part = find_part(parts, field);
    if (!part) return;
    if (spec.contains(field)) bad(field, "given twice (a file part and a spec field)");
    check_size(field, part->body.size(), max_bytes);
    files.emplace_back(field, std::string(part->body));
  };
  for (const char* field : kImageFields) take(field, max_image_bytes);
  for (const char* field : kVideoFields) take(field, max_video_bytes);
  for (const auto& part : parts) {  // each reference image its own part, in order
    if (part.name != kReferenceField) continue;
    if (spec.contains(kReferenceField)) bad(kReferenceField, "given twice (file parts and a spec field)");
    check_size(kReferenceField, part.body.size(), max_image_bytes);
    files.emplace_back(kReferenceField, std::string(part.body));
  }
  return files;
}

// JSON: an upload field holds the file itself (base64 or a data URL), never a server path.
UploadBytes json_uploads(const boost::json::object& spec, std::uint64_t max_image_bytes, std::uint64_t max_video_bytes) {
  UploadBytes files;
  for (const char* field : kImageFields)
    if (const auto* v = spec.if_contains(field); v != nullptr && v->is_string())  // another type: validation names it
      files.emplace_back(field, decode_image_text(std::string_view(v->get_string()), field, max_image_bytes));
  for (const char* field : kVideoFields)
    if (const auto* v = spec.if_contains(field); v != nullptr && v->is_string())
      files.emplace_back(field, decode_video_text(std::string_view(v->get_string()), field, max_video_bytes));
  if (const auto* v = spec.if_contains(kReferenceField); v != nullptr && v->is_array()) {
    const auto& refs = v->get_array();
    for (std::size_t i = 0; i < refs.size(); ++i) {
      const auto field = std::string(kReferenceField) + "[" + std::to_string(i) + "]";
      if (!refs[i].is_string()) bad(field, "must be an image (base64 or a data URL)");
      files.emplace_back(kReferenceField, decode_image_text(std::string_view(refs[i].get_string()), field, max_image_bytes));
    }
  }
  return files;
}

boost::json::object with_upload_paths(boost::json::object spec, const UploadPaths& paths) {
  bool references = false;
  for (const auto& [field, path] : paths) {
    if (field != kReferenceField) {
      spec[field] = path;
      continue;
    }
    if (!references) spec[field] = boost::json::array{};  // the uploads replace what the field held
    references = true;
    spec[field].as_array().push_back(boost::json::value(path));
  }
  return spec;
}

}  // namespace vgen
