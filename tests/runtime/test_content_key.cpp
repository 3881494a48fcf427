#include "runtime/content_key.hpp"

#include <doctest/doctest.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <limits>
#include <map>
#include <unordered_set>

#include "runtime/errors.hpp"

namespace json = boost::json;
using vgen::ContentKey;
using vgen::canonical_json;
using vgen::content_key;
using vgen::content_key_bytes;

namespace {

vgen::ErrorKind kind_of(auto&& f) {
  try {
    f();
  } catch (const vgen::Error& e) {
    return e.kind();
  }
  FAIL("expected a vgen::Error");
  return vgen::ErrorKind::internal;
}

}  // namespace

TEST_CASE("content_key_bytes matches the FIPS 180-2 SHA-256 test vectors") {
  CHECK(content_key_bytes("").hex() ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(content_key_bytes("abc").hex() ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(content_key_bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq").hex() ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("content_key hashes the canonical JSON text") {
  const json::value v = json::parse(R"({"b": 1, "a": [true, null, "x"]})");
  CHECK(canonical_json(v) == R"({"a":[true,null,"x"],"b":1})");
  CHECK(content_key(v) == content_key_bytes(canonical_json(v)));
}

TEST_CASE("object key order does not change the key") {
  const json::value a = json::parse(R"({"prompt": "a cat", "steps": 30, "seed": 7,
                                         "size": {"w": 512, "h": 320}})");
  const json::value b = json::parse(R"({"size": {"h": 320, "w": 512}, "seed": 7,
                                         "steps": 30, "prompt": "a cat"})");
  CHECK(canonical_json(a) == canonical_json(b));
  CHECK(content_key(a) == content_key(b));
}

TEST_CASE("object keys sort as unsigned bytes") {
  json::object o;
  o["\xc3\xa9"] = 1;  // U+00E9, a byte above 0x7f: sorts after every ASCII key
  o["z"] = 2;
  o["Z"] = 3;
  o[""] = 4;
  CHECK(canonical_json(o) == "{\"\":4,\"Z\":3,\"z\":2,\"\xc3\xa9\":1}");
}

TEST_CASE("numbers are canonical") {
  CHECK(content_key(json::value(2)) == content_key(json::value(2.0)));
  CHECK(content_key(json::parse("[2]")) == content_key(json::parse("[2.0]")));
  CHECK(content_key(json::parse("{\"x\": 2.00}")) == content_key(json::parse("{\"x\": 2}")));
  CHECK(content_key(json::value(2)) != content_key(json::value(2.5)));

  CHECK(canonical_json(json::value(std::uint64_t{5})) == "5");
  CHECK(canonical_json(json::value(std::int64_t{5})) == "5");
  CHECK(canonical_json(json::value(std::numeric_limits<std::uint64_t>::max())) ==
        "18446744073709551615");
  CHECK(canonical_json(json::value(std::numeric_limits<std::int64_t>::min())) ==
        "-9223372036854775808");
  CHECK(canonical_json(json::value(-0.0)) == "0");
  CHECK(canonical_json(json::value(-3.0)) == "-3");
  CHECK(canonical_json(json::value(0.1)) == "0.1");
  CHECK(canonical_json(json::value(1.5e-7)) == "1.5e-07");
  CHECK(canonical_json(json::value(9007199254740992.0)) == "9007199254740992");  // 2^53
  CHECK(canonical_json(json::value(1e20)) == "1e+20");  // integral but past 2^53
  CHECK(canonical_json(json::parse("1e2")) == "100");

  // The shortest form reads back as the same double.
  const double third = 1.0 / 3.0;
  CHECK(json::parse(canonical_json(json::value(third))).as_double() == third);

  CHECK(kind_of([] { canonical_json(json::value(std::numeric_limits<double>::quiet_NaN())); }) ==
        vgen::ErrorKind::invalid_argument);
  CHECK(kind_of([] { canonical_json(json::value(std::numeric_limits<double>::infinity())); }) ==
        vgen::ErrorKind::invalid_argument);
}

TEST_CASE("strings are escaped one way") {
  CHECK(canonical_json(json::value("a\"b\\c")) == R"("a\"b\\c")");
  CHECK(canonical_json(json::value("\b\f\n\r\t")) == R"("\b\f\n\r\t")");
  CHECK(canonical_json(json::value(std::string("\x01\x1f\0", 3))) == R"("\u0001\u001f\u0000")");
  CHECK(canonical_json(json::value("/ \x7f \xe2\x82\xac")) == "\"/ \x7f \xe2\x82\xac\"");
  // "\u00e9" and the raw UTF-8 bytes are the same string once parsed, so the same key.
  CHECK(content_key(json::parse(R"("\u00e9")")) == content_key(json::parse("\"\xc3\xa9\"")));
  // The canonical text parses back to an equal value.
  const json::value v = json::parse(R"({"k\n": ["\u0002", "q\"", 1.25, -7, {}]})");
  CHECK(json::parse(canonical_json(v)) == v);
}

TEST_CASE("arrays are order-sensitive, also when nested") {
  CHECK(content_key(json::parse("[1, 2]")) != content_key(json::parse("[2, 1]")));
  CHECK(content_key(json::parse("[[1, 2], [3]]")) != content_key(json::parse("[[3], [1, 2]]")));
  CHECK(content_key(json::parse("[[1, 2], [3]]")) != content_key(json::parse("[[1], [2, 3]]")));
  CHECK(content_key(json::parse("{\"a\": [[1, 2]]}")) !=
        content_key(json::parse("{\"a\": [[2, 1]]}")));
  CHECK(content_key(json::parse("[]")) != content_key(json::parse("{}")));
  CHECK(content_key(json::parse("null")) != content_key(json::parse("\"null\"")));
}

TEST_CASE("domains separate keys for the same JSON") {
  const json::value v = json::parse(R"({"prompt": "a cat"})");
  const ContentKey embedding = content_key("text_embedding", v);
  const ContentKey result = content_key("result", v);
  CHECK(embedding != result);
  CHECK(embedding != content_key(v));
  CHECK(content_key("", v) != content_key(v));
  CHECK(embedding == content_key_bytes(std::string("text_embedding") + '\0' + canonical_json(v)));
  CHECK(embedding == content_key("text_embedding", json::parse(R"({ "prompt" : "a cat" })")));
  CHECK(kind_of([&] { content_key(std::string_view("a\0b", 3), v); }) ==
        vgen::ErrorKind::invalid_argument);
}

TEST_CASE("hex round-trips") {
  const ContentKey k = content_key_bytes("abc");
  const std::string hex = k.hex();
  CHECK(hex.size() == 64);
  CHECK(hex.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(ContentKey::from_hex(hex) == k);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  CHECK(ContentKey::from_hex(upper) == k);
  CHECK(ContentKey{}.hex() == std::string(64, '0'));
  CHECK(ContentKey::from_hex(std::string(64, 'f')).bytes[31] == 0xff);
}

TEST_CASE("bad hex is rejected") {
  const std::string good = content_key_bytes("abc").hex();
  for (const std::string& bad : {std::string(), good.substr(0, 63), good + "0", good + good,
                                 "g" + good.substr(1), good.substr(0, 63) + "-",
                                 " " + good.substr(1), std::string(64, '\0'),
                                 "0x" + good.substr(2)}) {
    CAPTURE(bad);
    CHECK(kind_of([&] { ContentKey::from_hex(bad); }) == vgen::ErrorKind::invalid_argument);
  }
}

TEST_CASE("keys work in ordered and unordered containers") {
  const ContentKey a = content_key_bytes("a");
  const ContentKey b = content_key_bytes("b");
  CHECK(a != b);
  CHECK(((a < b) != (b < a)));
  std::unordered_set<ContentKey, vgen::ContentKeyHash> set{a, b, a};
  CHECK(set.size() == 2);
  std::map<ContentKey, int> map{{a, 1}, {b, 2}};
  CHECK(map.at(b) == 2);
  CHECK(vgen::ContentKeyHash{}(a) == vgen::ContentKeyHash{}(content_key_bytes("a")));
}
