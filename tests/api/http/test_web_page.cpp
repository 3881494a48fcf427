#include "api/http/web_page.hpp"

#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

using namespace vgen;
namespace fs = std::filesystem;

namespace {

ErrorKind kind_of(const fs::path& dir, std::string_view name) {
  try {
    web_file(dir, name);
  } catch (const Error& e) {
    return e.kind();
  }
  FAIL("no error for '" << std::string(name) << "'");
  return ErrorKind::internal;
}

}  // namespace

TEST_CASE("the shipped page is found in the build tree and served with its policy headers") {
  const auto dir = default_web_dir();
  REQUIRE_FALSE(dir.empty());
  CHECK(dir == fs::path(VGEN_TEST_SOURCE_DIR) / "web");
  const auto res = web_file(dir, "index.html");
  CHECK(res.result_int() == 200);
  CHECK(res[http::bhttp::field::content_type] == "text/html; charset=utf-8");
  const std::string csp(res["Content-Security-Policy"]);
  CHECK(csp.find("script-src 'self'") != std::string::npos);
  CHECK(csp.find("unsafe-inline") == std::string::npos);  // no inline script may run
  CHECK(csp.find("frame-ancestors 'none'") != std::string::npos);
  CHECK(res["X-Content-Type-Options"] == "nosniff");
  CHECK(res.body().find("<script src=\"ui/app.js\"") != std::string::npos);
  CHECK(res[http::bhttp::field::access_control_allow_origin].empty());  // same origin only
  CHECK(web_file(dir, "app.js")[http::bhttp::field::content_type] == "text/javascript; charset=utf-8");
  CHECK(web_file(dir, "style.css")[http::bhttp::field::content_type] == "text/css; charset=utf-8");
}

TEST_CASE("names that could leave the page's folder, hidden files and missing files are not found") {
  vgen::test::TempDir tmp;
  const auto web = tmp.path() / "web";
  fs::create_directories(web);
  std::ofstream(web / "index.html") << "<p>page</p>";
  std::ofstream(web / ".secret") << "no";
  std::ofstream(tmp.path() / "outside.txt") << "no";
  CHECK(web_file(web, "index.html").body() == "<p>page</p>");
  for (const char* name : {"..", "../outside.txt", ".secret", "", "a/b", "a\\b", "%2e%2e", "missing.js"})
    CHECK(kind_of(web, name) == ErrorKind::not_found);
  fs::create_directories(web / "dir.js");
  CHECK(kind_of(web, "dir.js") == ErrorKind::not_found);  // a folder is no file
  CHECK(kind_of({}, "index.html") == ErrorKind::not_found);  // not installed: said so, not a crash
}

TEST_CASE("VGEN_WEB_DIR wins, and one without a page is named") {
  vgen::test::TempDir tmp;
  std::ofstream(tmp.path() / "index.html") << "x";
  ::setenv("VGEN_WEB_DIR", tmp.path().c_str(), 1);
  CHECK(default_web_dir() == tmp.path());
  ::setenv("VGEN_WEB_DIR", (tmp.path() / "none").c_str(), 1);
  CHECK_THROWS_WITH_AS(default_web_dir(), doctest::Contains("no index.html"), Error);
  ::unsetenv("VGEN_WEB_DIR");
}

TEST_CASE("content types by extension") {
  CHECK(web_content_type("a.svg") == "image/svg+xml");
  CHECK(web_content_type("a.png") == "image/png");
  CHECK(web_content_type("a.bin") == "application/octet-stream");
  CHECK(web_content_type("html") == "application/octet-stream");
}
