// multipart/form-data: fields and files as curl -F sends them; truncated and hostile bodies
// are refused as bad input, never a crash.
#include "api/http/multipart.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"

#include <random>
#include <string>

using namespace vgen;

namespace {

std::string error_of(std::string_view body, std::string_view boundary = "XyZ", const MultipartLimits& limits = {}) {
  try {
    parse_multipart(body, boundary, limits);
    return "";
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
}

const std::string kPng("\x89PNG\r\n\x1a\n\0\0\r\n--Xy binary", 27);

std::string body_of() {
  return "preamble to ignore\r\n"
         "--XyZ\r\n"
         "Content-Disposition: form-data; name=\"spec\"\r\n"
         "\r\n"
         "{\"prompt\":\"a cat\"}\r\n"
         "--XyZ\r\n"
         "content-disposition: form-data; name=\"image\"; filename=\"my \\\"cat\\\".png\"\r\n"
         "Content-Type: image/png\r\n"
         "\r\n" +
         kPng +
         "\r\n"
         "--XyZ--\r\n"
         "epilogue";
}

}  // namespace

TEST_CASE("fields and files come back with their names, file names, types and exact bytes") {
  const auto body = body_of();
  const auto parts = parse_multipart(body, "XyZ");
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].name == "spec");
  CHECK(parts[0].filename.empty());
  CHECK(parts[0].body == "{\"prompt\":\"a cat\"}");
  CHECK(parts[1].name == "image");
  CHECK(parts[1].filename == "my \"cat\".png");
  CHECK(parts[1].content_type == "image/png");
  CHECK(parts[1].body == kPng);  // CRLF, NUL and a near-boundary inside the data survive
  CHECK(find_part(parts, "image") == &parts[1]);
  CHECK(find_part(parts, "last_image") == nullptr);
  // No preamble; an empty part.
  const std::string plain = "--b\r\nContent-Disposition: form-data; name=a\r\n\r\n\r\n--b--";
  const auto p = parse_multipart(plain, "b");
  REQUIRE(p.size() == 1);
  CHECK(p[0].name == "a");
  CHECK(p[0].body.empty());
}

TEST_CASE("the boundary comes from the Content-Type, quoted or not") {
  CHECK(multipart_boundary("multipart/form-data; boundary=XyZ") == "XyZ");
  CHECK(multipart_boundary("Multipart/Form-Data;charset=utf-8; BOUNDARY=\"a b:c\"") == "a b:c");
  CHECK_THROWS_AS(multipart_boundary("application/json"), Error);
  CHECK_THROWS_AS(multipart_boundary("multipart/form-data"), Error);
  CHECK_THROWS_AS(multipart_boundary("multipart/form-data; boundary="), Error);
  CHECK_THROWS_AS(multipart_boundary("multipart/form-data; boundary=" + std::string(71, 'x')), Error);
  CHECK_THROWS_AS(multipart_boundary("multipart/form-data; boundary=\"open"), Error);
}

TEST_CASE("truncated, malformed and oversized bodies are refused by name") {
  const auto body = body_of();
  CHECK(error_of("").find("never appears") != std::string::npos);
  CHECK(error_of(body.substr(0, body.size() - 20)).find("truncated body") != std::string::npos);
  CHECK(error_of(body.substr(0, 60)).find("truncated") != std::string::npos);
  CHECK(error_of("--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--").find("no Content-Disposition") != std::string::npos);
  CHECK(error_of("--XyZ\r\nContent-Disposition: attachment; name=a\r\n\r\nx\r\n--XyZ--").find("not form-data") != std::string::npos);
  CHECK(error_of("--XyZ\r\nContent-Disposition: form-data\r\n\r\nx\r\n--XyZ--").find("no field name") != std::string::npos);
  CHECK(error_of("--XyZ\r\nno colon here\r\n\r\nx\r\n--XyZ--").find("no ':'") != std::string::npos);
  CHECK(error_of("--XyZgarbage").find("no line end") != std::string::npos);
  const std::string twice = "--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n"
                            "--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\n2\r\n--XyZ--";
  CHECK(error_of(twice).find("'a' given twice") != std::string::npos);
  std::string many;
  for (int i = 0; i < 3; ++i) many += "--XyZ\r\nContent-Disposition: form-data; name=f" + std::to_string(i) + "\r\n\r\nx\r\n";
  many += "--XyZ--";
  CHECK(error_of(many, "XyZ", {.max_parts = 2}).find("more than 2 parts") != std::string::npos);
  CHECK(parse_multipart(many, "XyZ", {.max_parts = 3}).size() == 3);
  const std::string long_header = "--XyZ\r\nContent-Disposition: form-data; name=a\r\nX-Pad: " + std::string(5000, 'p') +
                                  "\r\n\r\nx\r\n--XyZ--";
  CHECK(error_of(long_header).find("longer than 4096") != std::string::npos);
}

TEST_CASE("random damage to a valid body parses or is refused as bad input" * doctest::timeout(60)) {
  std::mt19937 rng(7);
  const auto source = body_of();
  int refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string body = source;
    for (int e = 0, n = 1 + static_cast<int>(rng() % 6); e < n; ++e) body[rng() % body.size()] = static_cast<char>(rng());
    if (rng() % 3 == 0) body.resize(rng() % body.size());
    try {
      for (const auto& p : parse_multipart(body, "XyZ")) CHECK(p.body.data() >= body.data());
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      ++refused;
    }
  }
  CHECK(refused > 0);
}
