#include "stages/model/safetensors.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "tests/support/temp_dir.hpp"

#include <cstring>
#include <fstream>

using namespace vgen;
namespace fs = std::filesystem;

namespace {

std::string floats(std::initializer_list<float> xs) {
  std::string b(xs.size() * 4, '\0');
  std::memcpy(b.data(), xs.begin(), b.size());
  return b;
}

// A hand-written file: the 8-byte length, `header` as is, then `data`.
fs::path raw_file(const test::TempDir& dir, const std::string& header, const std::string& data, const char* name = "x.safetensors") {
  const auto path = dir / name;
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header << data;
  return path;
}

std::string error_of(const fs::path& file) {
  try {
    SafetensorsFile::open(file);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("write then open: names, dtypes, shapes, metadata and bytes round-trip") {
  test::TempDir dir;
  const auto file = dir / "a.safetensors";
  write_safetensors(file, {{"w", "F32", {2, 2}, floats({1, 2, 3, 4})}, {"alpha", "F32", {}, floats({8})}},
                    {{"format", "pt"}});
  const auto f = SafetensorsFile::open(file);
  REQUIRE(f.tensors().size() == 2);
  const auto* w = f.find("w");
  REQUIRE(w);
  CHECK(w->dtype == "F32");
  CHECK(w->shape == std::vector<std::int64_t>{2, 2});
  CHECK(f.read(*w) == floats({1, 2, 3, 4}));
  const auto* a = f.find("alpha");
  REQUIRE(a);
  CHECK(a->shape.empty());
  CHECK(a->elements() == 1);
  CHECK(f.read(*a) == floats({8}));
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.find("nope") == nullptr);
}

TEST_CASE("hostile files are refused naming the file and the first bad key") {
  test::TempDir dir;
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  SUBCASE("shorter than the length field") {
    const auto p = dir / "short.safetensors";
    std::ofstream(p, std::ios::binary) << "abc";
    const auto e = error_of(p);
    CHECK(e.find("short.safetensors") != std::string::npos);
    CHECK(e.find("truncated") != std::string::npos);
  }
  SUBCASE("header length beyond the file") {
    const auto p = raw_file(dir, ok, std::string(8, '\0'));
    std::filesystem::resize_file(p, 8 + 10);
    CHECK(error_of(p).find("header length") != std::string::npos);
  }
  SUBCASE("a huge header length is refused before any allocation") {
    const auto p = dir / "huge.safetensors";
    std::ofstream out(p, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(0xff));
    out.close();
    CHECK(error_of(p).find("exceeds 100 MiB") != std::string::npos);
  }
  SUBCASE("the data is truncated") {
    CHECK(error_of(raw_file(dir, ok, std::string(4, '\0'))).find("truncated: tensor ends at byte 8") != std::string::npos);
    CHECK(error_of(raw_file(dir, ok, std::string(4, '\0'))).find("tensor 'w'") != std::string::npos);
  }
  SUBCASE("not JSON, not an object") {
    CHECK(error_of(raw_file(dir, "{nope", "")).find("not JSON") != std::string::npos);
    CHECK(error_of(raw_file(dir, "[1]", "")).find("not a JSON object") != std::string::npos);
  }
  SUBCASE("offsets that disagree with shape and dtype") {
    const auto e = error_of(raw_file(dir, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')));
    CHECK(e.find("need 12") != std::string::npos);
    CHECK(e.find("tensor 'w'") != std::string::npos);
  }
  SUBCASE("end before begin, wrong arity, negative dims, unknown dtype, overflow") {
    CHECK(error_of(raw_file(dir, R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", std::string(8, '\0')))
              .find("data_offsets") != std::string::npos);
    CHECK(error_of(raw_file(dir, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", std::string(8, '\0')))
              .find("data_offsets") != std::string::npos);
    CHECK(error_of(raw_file(dir, R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0')))
              .find("non-negative") != std::string::npos);
    CHECK(error_of(raw_file(dir, R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')))
              .find("unknown dtype 'Q4'") != std::string::npos);
    CHECK(error_of(raw_file(dir, R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                            std::string(8, '\0')))
              .find("overflows") != std::string::npos);
  }
  SUBCASE("overlapping tensors, holes and trailing bytes") {
    CHECK(error_of(raw_file(dir, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            std::string(8, '\0')))
              .find("overlaps") != std::string::npos);
    CHECK(error_of(raw_file(dir, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')))
              .find("hole") != std::string::npos);
    CHECK(error_of(raw_file(dir, ok, std::string(12, '\0'))).find("belong to none") != std::string::npos);
  }
  SUBCASE("metadata must be strings") {
    CHECK(error_of(raw_file(dir, R"({"__metadata__":{"a":1}})", "")).find("'__metadata__' value") != std::string::npos);
    CHECK(error_of(raw_file(dir, R"({"__metadata__":[]})", "")).find("'__metadata__' is not an object") != std::string::npos);
  }
  SUBCASE("a file shortened after open fails on read, naming the tensor") {
    const auto p = raw_file(dir, ok, std::string(8, '\0'));
    const auto f = SafetensorsFile::open(p);
    std::filesystem::resize_file(p, 12);
    try {
      f.read(*f.find("w"));
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("changed since it was opened") != std::string::npos);
    }
  }
  SUBCASE("a directory is no file") { CHECK(error_of(dir.path()).find("not a regular file") != std::string::npos); }
}
