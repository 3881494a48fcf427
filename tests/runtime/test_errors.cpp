#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <new>
#include <string>

using namespace vgen;

namespace {

// Whether `s` is well-formed UTF-8 (lead byte, then the right number of continuation bytes).
bool whole_characters(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

TEST_CASE("truncate_utf8 never splits a character") {
  // 1-, 2-, 3- and 4-byte characters: "a", "é", "€", "😀".
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z\xF0\x9F\x98\x80";
  REQUIRE(whole_characters(text));
  for (std::size_t max = 0; max <= text.size() + 2; ++max) {
    CAPTURE(max);
    const auto cut = truncate_utf8(text, max);
    CHECK(cut.size() <= max);
    CHECK(cut.size() + 3 >= std::min(max, text.size()));  // backs up by less than one character
    CHECK(text.compare(0, cut.size(), cut) == 0);         // a prefix
    CHECK(whole_characters(cut));
  }
  CHECK(truncate_utf8(text, 2) == "a");                   // would split "é"
  CHECK(truncate_utf8(text, 3) == "a\xC3\xA9");
  CHECK(truncate_utf8(text, 8) == "a\xC3\xA9\xE2\x82\xAC");  // would split the emoji after 2 bytes
  CHECK(truncate_utf8(text, text.size()) == text);
  CHECK(truncate_utf8("", 0).empty());
}

TEST_CASE("truncate_utf8 cuts bytes that are not UTF-8 like any other") {
  const std::string junk(10, '\x80');  // continuation bytes only: back up at most 3
  CHECK(truncate_utf8(junk, 6).size() == 3);
  CHECK(truncate_utf8("abcdef", 4) == "abcd");
}

TEST_CASE("kinds map to one exit code and one HTTP status each") {
  CHECK(exit_code_for(ErrorKind::invalid_argument) == 2);
  CHECK(http_status_for(ErrorKind::invalid_argument) == 400);
  CHECK(exit_code_for(ErrorKind::cancelled) == 130);
  CHECK(http_status_for(ErrorKind::internal) == 500);
  CHECK(classify(std::make_exception_ptr(std::bad_alloc())) == ErrorKind::out_of_memory);
  CHECK(classify(std::make_exception_ptr(Error(ErrorKind::not_found, "x"))) == ErrorKind::not_found);
  CHECK(describe(std::make_exception_ptr(Error(ErrorKind::internal, "boom"))) == "boom");
}
