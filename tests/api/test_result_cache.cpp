#include "api/result_cache.hpp"

#include "tests/support/python_reference.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <thread>

namespace fs = std::filesystem;
using namespace vgen;
using namespace vgen::detail;

namespace {
ContentKey key_of(const std::string& s) { return content_key("test", boost::json::object{{"k", s}}); }
}  // namespace

TEST_CASE("a cached output is served while it is what was written; a changed file is dropped") {
  const auto dir = test::temp_dir("vgen-result-cache-");
  std::ofstream(dir / "a.mp4") << "video";
  ResultCache cache(8, std::chrono::minutes(5));
  CHECK(cache.enabled());
  CHECK_FALSE(cache.get(key_of("a")));
  cache.put(key_of("a"), dir / "a.mp4");
  auto hit = cache.get(key_of("a"));
  REQUIRE(hit);
  CHECK(hit->path == dir / "a.mp4");
  CHECK(hit->bytes == 5);
  std::ofstream(dir / "a.mp4", std::ios::app) << " longer";  // changed behind our back
  CHECK_FALSE(cache.get(key_of("a")));
  CHECK_FALSE(cache.get(key_of("a")));  // and forgotten
  fs::remove_all(dir);
}

TEST_CASE("the first job of a key leads; later ones get the leader until it is released") {
  ResultCache cache(8, std::chrono::minutes(5));
  auto a = std::make_shared<JobEntry>(), b = std::make_shared<JobEntry>();
  CHECK(cache.lead(key_of("k"), a) == nullptr);
  CHECK(cache.lead(key_of("k"), b) == a);
  cache.release(key_of("k"), b.get());  // not the leader: nothing changes
  CHECK(cache.lead(key_of("k"), b) == a);
  cache.release(key_of("k"), a.get());
  CHECK(cache.lead(key_of("k"), b) == nullptr);  // b leads now
}

TEST_CASE("with no entries the cache keeps nothing and every job leads") {
  const auto dir = test::temp_dir("vgen-result-cache-");
  std::ofstream(dir / "a.mp4") << "video";
  ResultCache cache(0, std::chrono::minutes(5));
  CHECK_FALSE(cache.enabled());
  cache.put(key_of("a"), dir / "a.mp4");
  CHECK_FALSE(cache.get(key_of("a")));
  auto a = std::make_shared<JobEntry>(), b = std::make_shared<JobEntry>();
  CHECK(cache.lead(key_of("k"), a) == nullptr);
  CHECK(cache.lead(key_of("k"), b) == nullptr);
  fs::remove_all(dir);
}

