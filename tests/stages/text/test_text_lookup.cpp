#include "stages/text/text_lookup.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "runtime/errors.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;

namespace {

// A fake encoder: text -> [1, size, 2] filled with its length; records every call.
struct FakeEncoder {
  std::vector<std::vector<std::string>> calls;
  TextLookup::Encode fn() {
    return [this](const std::vector<std::string>& texts) {
      calls.push_back(texts);
      std::vector<at::Tensor> out;
      for (const auto& t : texts) out.push_back(at::full({1, static_cast<std::int64_t>(t.size()) + 1, 2}, double(t.size())));
      return out;
    };
  }
};

TtlCache<at::Tensor> make_cache() { return TtlCache<at::Tensor>(TtlCacheOptions{.max_entries = 16, .max_cost = 1 << 20}); }

}  // namespace

TEST_CASE("each distinct text is encoded once, in one call for the group's misses") {
  auto cache = make_cache();
  FakeEncoder enc;
  TextLookup lookup(&cache, "pkg", "cpu");
  CHECK_FALSE(lookup.want("a cat"));
  CHECK_FALSE(lookup.want(""));
  CHECK(lookup.want("a cat"));  // an earlier job of the group pays for it
  CHECK_FALSE(lookup.want("a dog"));
  CHECK(lookup.misses() == 3);
  lookup.encode_misses(enc.fn());
  REQUIRE(enc.calls.size() == 1);
  CHECK(enc.calls[0] == std::vector<std::string>{"a cat", "", "a dog"});
  CHECK(lookup.get("a cat").size(1) == 6);
  CHECK(lookup.get("").size(1) == 1);
  CHECK(lookup.get("a dog")[0][0][0].item<double>() == 5.0);
  CHECK(cache.stats().entries == 3);
}

TEST_CASE("the next group finds cached texts and encodes only what is new") {
  auto cache = make_cache();
  FakeEncoder enc;
  {
    TextLookup first(&cache, "pkg", "cpu");
    first.want("a cat");
    first.encode_misses(enc.fn());
  }
  TextLookup second(&cache, "pkg", "cpu");
  CHECK(second.want("a cat"));
  CHECK_FALSE(second.want("a bird"));
  second.encode_misses(enc.fn());
  REQUIRE(enc.calls.size() == 2);
  CHECK(enc.calls[1] == std::vector<std::string>{"a bird"});
  CHECK(second.get("a cat")[0][0][0].item<double>() == 5.0);

  // Another device or package is another entry.
  TextLookup other(&cache, "pkg", "cuda:0");
  CHECK_FALSE(other.want("a cat"));
  CHECK(text_embedding_key("pkg", "cpu", "a cat") != text_embedding_key("pkg", "cuda:0", "a cat"));
  CHECK(text_embedding_key("pkg", "cpu", "a cat") != text_embedding_key("pkg2", "cpu", "a cat"));
}

TEST_CASE("no misses, no encoder call; without a cache every group encodes") {
  FakeEncoder enc;
  auto cache = make_cache();
  TextLookup warm(&cache, "pkg", "cpu");
  warm.encode_misses(enc.fn());
  CHECK(enc.calls.empty());

  TextLookup a(nullptr, "pkg", "cpu"), b(nullptr, "pkg", "cpu");
  CHECK_FALSE(a.want("x"));
  a.encode_misses(enc.fn());
  CHECK_FALSE(b.want("x"));
  b.encode_misses(enc.fn());
  CHECK(enc.calls.size() == 2);
}

TEST_CASE("misuse is an internal error, not a crash") {
  TextLookup lookup(nullptr, "pkg", "cpu");
  CHECK_THROWS_AS(lookup.get("never asked"), Error);
  lookup.want("asked");
  CHECK_THROWS_AS(lookup.get("asked"), Error);  // not encoded yet
  CHECK_THROWS_AS(lookup.encode_misses([](const std::vector<std::string>&) { return std::vector<at::Tensor>{}; }), Error);
}
