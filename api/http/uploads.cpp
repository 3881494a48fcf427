#include "api/http/uploads.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/errors.hpp"

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

std::string decode_image_text(std::string_view text, std::string_view field, std::uint64_t max_bytes) {
  if (text.starts_with("data:")) {
    const auto comma = text.find(',');
    if (comma == std::string_view::npos) bad(field, "a data URL without ','");
    const auto meta = text.substr(5, comma - 5);
    if (!meta.ends_with(";base64")) bad(field, "a data URL must be base64 (\"data:image/png;base64,...\")");
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
    if (v < 0 || padding) bad(field, "not base64 image data (nor a data URL); HTTP jobs send the image itself, not a path");
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (bits >= 6) bad(field, "base64 data ends in the middle of a byte");
  if (out.size() > max_bytes) bad(field, "larger than " + std::to_string(max_bytes) + " bytes (got " + std::to_string(out.size()) + ")");
  // '/' and letters are base64 too, so a path decodes to bytes: say what was expected.
  const bool image = out.starts_with("\x89PNG") || out.starts_with("\xFF\xD8\xFF") ||
                     (out.size() >= 12 && out.starts_with("RIFF") && out.substr(8, 4) == "WEBP");
  if (!image)
    bad(field, "not base64 of a PNG, JPEG or WebP image (nor a data URL of one); HTTP jobs send the image itself, not a path");
  return out;
}

UploadStore::UploadStore(fs::path dir, ImageLimits limits) : dir_(fs::absolute(std::move(dir)).lexically_normal()), limits_(limits) {}

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

}  // namespace vgen
