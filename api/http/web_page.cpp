#include "api/http/web_page.hpp"

#include "runtime/errors.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace vgen {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' blob: data:; "
    "media-src 'self' blob:; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

bool has_page(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "index.html", ec);
}

// One plain file name: no separators, no "..", no hidden files, nothing a shell or URL escapes.
bool plain_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

}  // namespace

fs::path default_web_dir() {
  if (const char* env = std::getenv("VGEN_WEB_DIR"); env && *env) {
    if (!has_page(env)) throw_error(ErrorKind::not_found, std::string("VGEN_WEB_DIR=") + env + ": no index.html there");
    return env;
  }
  std::vector<fs::path> candidates;
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((exe.parent_path() / ".." / "share" / "vgen" / "web").lexically_normal());
#ifdef VGEN_SOURCE_DIR
  candidates.push_back(fs::path(VGEN_SOURCE_DIR) / "web");
#endif
  for (const auto& c : candidates)
    if (has_page(c)) return c;
  return {};
}

std::string_view web_content_type(std::string_view name) {
  if (ends_with(name, ".html")) return "text/html; charset=utf-8";
  if (ends_with(name, ".js")) return "text/javascript; charset=utf-8";
  if (ends_with(name, ".css")) return "text/css; charset=utf-8";
  if (ends_with(name, ".svg")) return "image/svg+xml";
  if (ends_with(name, ".png")) return "image/png";
  if (ends_with(name, ".ico")) return "image/x-icon";
  return "application/octet-stream";
}

http::StringResponse web_file(const fs::path& web_dir, std::string_view name) {
  if (web_dir.empty()) throw_error(ErrorKind::not_found, "the web page is not installed (set VGEN_WEB_DIR to its folder)");
  if (!plain_name(name)) throw_error(ErrorKind::not_found, "no page file '" + std::string(name) + "'");
  std::ifstream in(web_dir / std::string(name), std::ios::binary);
  std::error_code ec;
  if (!in || !fs::is_regular_file(web_dir / std::string(name), ec))
    throw_error(ErrorKind::not_found, "no page file '" + std::string(name) + "'");
  std::ostringstream body;
  body << in.rdbuf();
  http::StringResponse res{http::bhttp::status::ok, 11};
  res.set(http::bhttp::field::content_type, web_content_type(name));
  res.set(http::bhttp::field::cache_control, "no-cache");
  res.set("Content-Security-Policy", kPolicy);
  res.set("X-Content-Type-Options", "nosniff");
  res.set("Referrer-Policy", "no-referrer");
  res.body() = std::move(body).str();
  return res;
}

}  // namespace vgen
