#include "api/http/http_api.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

// The routes are served by api/http/http_api.cpp and described by docs/openapi.json; these cases
// keep the two in sync. (The routes' behaviour is tested end to end against the real binary
// in tests/python/test_cli_serve.py.)

namespace json = boost::json;

namespace {

std::filesystem::path source_dir() {
  if (const char* env = std::getenv("VGEN_SOURCE_DIR"); env && *env) return env;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

json::value openapi() {
  const auto path = source_dir() / "docs" / "openapi.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, "cannot read " << path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

void collect_refs(const json::value& v, std::set<std::string>& refs) {
  if (const auto* o = v.if_object()) {
    for (const auto& [k, x] : *o) {
      if (k == "$ref" && x.is_string()) refs.insert(std::string(x.get_string()));
      else collect_refs(x, refs);
    }
  } else if (const auto* a = v.if_array()) {
    for (const auto& x : *a) collect_refs(x, refs);
  }
}

}  // namespace

TEST_CASE("docs/openapi.json lists exactly the routes the API serves") {
  const auto doc = openapi();
  std::set<std::string> documented, served;
  for (const auto& [path, item] : doc.at("paths").as_object())
    for (const auto& [method, op] : item.as_object())
      if (method != "parameters" && method != "summary" && method != "description") {
        std::string m(method);
        for (auto& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        documented.insert(m + " " + std::string(path));
      }
  for (const auto& r : vgen::HttpApi::routes()) served.insert(r.method + " " + r.path);
  CHECK(documented == served);
}

TEST_CASE("docs/openapi.json: every $ref resolves, every operation documents its responses") {
  const auto doc = openapi();
  CHECK(doc.at("openapi").as_string().starts_with("3.0"));
  std::set<std::string> refs;
  collect_refs(doc, refs);
  for (const auto& ref : refs) {
    CAPTURE(ref);
    REQUIRE(ref.starts_with("#/"));
    const json::value* at = &doc;
    std::string_view rest = std::string_view(ref).substr(2);
    while (!rest.empty()) {
      const auto slash = std::min(rest.find('/'), rest.size());
      at = at->as_object().if_contains(rest.substr(0, slash));
      REQUIRE(at != nullptr);
      rest.remove_prefix(std::min(slash + 1, rest.size()));
    }
  }
  for (const auto& [path, item] : doc.at("paths").as_object())
    for (const auto& [method, op] : item.as_object()) {
      if (method == "parameters") continue;
      CAPTURE(std::string(path));
      CHECK(op.as_object().contains("responses"));
      // Every route but /healthz can answer 401 when the service has a token.
      if (path != "/healthz") CHECK(op.at("responses").as_object().contains("401"));
    }
}
