#include "api/http/http_response.hpp"

#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/write.hpp>
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace bhttp = boost::beast::http;
namespace http = vgen::http;

namespace {

// A file of `size` bytes, removed with the object.
struct TempFile {
  explicit TempFile(std::size_t size)
      : path(std::filesystem::temp_directory_path() / ("vgen_http_response_" + std::to_string(::getpid()))) {
    for (std::size_t i = 0; i < size; ++i) content.push_back(static_cast<char>('a' + i % 26));
    std::ofstream(path, std::ios::binary) << content;
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::filesystem::path path;
  std::string content;
};

http::Request get_with_range(std::string range = {}) {
  http::Request r{bhttp::verb::get, "/video", 11};
  if (!range.empty()) r.set(bhttp::field::range, range);
  return r;
}

// A SyncWriteStream that appends to a string.
struct StringSink {
  std::string& out;
  template <class Buffers>
  std::size_t write_some(const Buffers& buffers, boost::beast::error_code& ec) {
    ec = {};
    const auto before = out.size();
    for (const auto b : boost::beast::buffers_range_ref(buffers))
      out.append(static_cast<const char*>(b.data()), b.size());
    return out.size() - before;
  }
  template <class Buffers>
  std::size_t write_some(const Buffers& buffers) {
    boost::beast::error_code ec;
    return write_some(buffers, ec);
  }
};

// The body a FileResponse sends: Beast's serializer reads size() bytes from the file's position.
std::string body_of(http::FileResponse& res) {
  res.prepare_payload();
  std::string out;
  StringSink sink{out};
  boost::beast::error_code ec;
  bhttp::write(sink, res, ec);
  REQUIRE_FALSE(ec);
  const auto body = out.substr(out.find("\r\n\r\n") + 4);
  CHECK(res[bhttp::field::content_length] == std::to_string(body.size()));
  return body;
}

}  // namespace

TEST_CASE("parse_range") {
  auto r = http::parse_range("bytes=0-9", 100);
  REQUIRE(r);
  CHECK((r->first == 0 && r->last == 9 && r->satisfiable));
  r = http::parse_range("bytes=90-", 100);
  CHECK((r && r->first == 90 && r->last == 99));
  r = http::parse_range("bytes=-10", 100);
  CHECK((r && r->first == 90 && r->last == 99));
  r = http::parse_range("bytes=-1000", 100);
  CHECK((r && r->first == 0 && r->last == 99));
  r = http::parse_range("bytes=50-1000", 100);
  CHECK((r && r->last == 99));
  r = http::parse_range(" bytes= 3 - 4 ", 100);
  CHECK((r && r->first == 3 && r->last == 4));
  CHECK_FALSE(http::parse_range("bytes=100-", 100)->satisfiable);
  CHECK_FALSE(http::parse_range("bytes=-0", 100)->satisfiable);
  CHECK_FALSE(http::parse_range("bytes=0-", 0)->satisfiable);   // nothing to serve
  CHECK_FALSE(http::parse_range("bytes=9-3", 100));    // invalid: ignored
  CHECK_FALSE(http::parse_range("bytes=0-1,5-6", 100));  // several ranges: ignored
  CHECK_FALSE(http::parse_range("items=0-1", 100));
  CHECK_FALSE(http::parse_range("bytes=a-b", 100));
  CHECK_FALSE(http::parse_range("bytes=5", 100));
}

TEST_CASE("sse_event prefixes every data line") {
  CHECK(http::sse_event("progress", "{\"a\":1}") == "event: progress\ndata: {\"a\":1}\n\n");
  CHECK(http::sse_event("x", "a\nb") == "event: x\ndata: a\ndata: b\n\n");
  CHECK(http::sse_event("x", "") == "event: x\ndata: \n\n");
}

TEST_CASE("error_response: JSON body, status from the one mapping, Retry-After on 429") {
  auto r = http::error_response(vgen::ErrorKind::overloaded, "queue full");
  CHECK(r.result_int() == 429);
  CHECK(r[bhttp::field::retry_after] == "1");
  CHECK(r.body() == R"({"error":{"kind":"overloaded","message":"queue full"}})");
  CHECK(http::error_response(vgen::ErrorKind::invalid_argument, "x").result_int() == 400);
  r = http::error_response(503, "overloaded", "too many connections");
  CHECK(r[bhttp::field::retry_after] == "1");
  r = http::error_response(404, "not_found", "quote \" in it");
  CHECK(r.find(bhttp::field::retry_after) == r.end());
  CHECK(r[bhttp::field::content_type] == "application/json");
  CHECK(r.body() == R"({"error":{"kind":"not_found","message":"quote \" in it"}})");
  r = http::error_response(std::make_exception_ptr(vgen::Error(vgen::ErrorKind::not_found, "gone")));
  CHECK(r.result_int() == 404);
  CHECK(r.body() == R"({"error":{"kind":"not_found","message":"gone"}})");
  CHECK(http::error_response(std::make_exception_ptr(std::logic_error("bug"))).result_int() == 500);
}

TEST_CASE("file_response: the whole file, one range, 416, ignored ranges, missing file") {
  TempFile file(1000);
  auto res = http::file_response(get_with_range(), file.path, "video/mp4");
  auto* whole = std::get_if<http::FileResponse>(&res);
  REQUIRE(whole);
  CHECK(whole->result_int() == 200);
  CHECK((*whole)[bhttp::field::content_type] == "video/mp4");
  CHECK((*whole)[bhttp::field::accept_ranges] == "bytes");
  CHECK(whole->find(bhttp::field::content_range) == whole->end());
  CHECK(body_of(*whole) == file.content);

  res = http::file_response(get_with_range("bytes=10-19"), file.path, "video/mp4");
  auto* part = std::get_if<http::FileResponse>(&res);
  REQUIRE(part);
  CHECK(part->result_int() == 206);
  CHECK((*part)[bhttp::field::content_range] == "bytes 10-19/1000");
  CHECK(body_of(*part) == file.content.substr(10, 10));
  res = http::file_response(get_with_range("bytes=-5"), file.path, "video/mp4");
  CHECK(body_of(std::get<http::FileResponse>(res)) == file.content.substr(995));

  res = http::file_response(get_with_range("bytes=1000-"), file.path, "video/mp4");
  auto* refused = std::get_if<http::StringResponse>(&res);
  REQUIRE(refused);
  CHECK(refused->result_int() == 416);
  CHECK((*refused)[bhttp::field::content_range] == "bytes */1000");
  CHECK((*refused)[bhttp::field::accept_ranges] == "bytes");

  res = http::file_response(get_with_range("bytes=0-1,3-4"), file.path, "video/mp4");
  CHECK(std::get<http::FileResponse>(res).result_int() == 200);

  auto missing = file.path;
  missing += ".missing";
  try {
    http::file_response(get_with_range(), missing, "video/mp4");
    FAIL("no error for a missing file");
  } catch (const vgen::Error& e) {
    CHECK(e.kind() == vgen::ErrorKind::not_found);
  }
}

TEST_CASE("has_content_type: case-insensitive, parameters ignored, absent is false") {
  http::Request r{bhttp::verb::post, "/v1/jobs", 11};
  CHECK_FALSE(http::has_content_type(r, "application/json"));
  r.set(bhttp::field::content_type, "Multipart/Form-Data; boundary=xyz");
  CHECK(http::has_content_type(r, "multipart/form-data"));
  CHECK_FALSE(http::has_content_type(r, "application/json"));
  r.set(bhttp::field::content_type, "application/json-seq");
  CHECK_FALSE(http::has_content_type(r, "application/json"));  // a longer type is another type
}
