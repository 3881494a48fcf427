#include "runtime/job_id.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <thread>
#include <vector>

using namespace vgen;

TEST_CASE("ids are UUIDv7: version, variant, form, and the time they were made") {
  const auto before = std::chrono::system_clock::now();
  const auto id = new_job_id();
  const auto after = std::chrono::system_clock::now();
  CHECK(id.size() == 36);
  CHECK(is_job_id(id));
  CHECK(id[14] == '7');
  CHECK(std::string("89ab").find(id[19]) != std::string::npos);
  const auto t = job_id_time(id);
  REQUIRE(t);
  CHECK(*t >= std::chrono::time_point_cast<std::chrono::milliseconds>(before));
  CHECK(*t <= after);
  CHECK_FALSE(is_job_id("job-1"));
  CHECK_FALSE(is_job_id("0193b5d6-8a1c-4f3e-9b2a-4c5d6e7f8091"));  // version 4
  CHECK_FALSE(is_job_id("0193b5d6-8a1c-7f3e-cb2a-4c5d6e7f8091"));  // variant 110
  CHECK_FALSE(is_job_id("0193B5D6-8A1C-7F3E-9B2A-4C5D6E7F8091"));  // upper case is not what we write
  CHECK_FALSE(job_id_time("job-7"));
}

TEST_CASE("ids made one after another are unique and sort in the order they were made") {
  std::vector<std::string> ids;
  for (int i = 0; i < 20000; ++i) ids.push_back(new_job_id());  // several per millisecond
  CHECK(std::is_sorted(ids.begin(), ids.end()));
  CHECK(std::set<std::string>(ids.begin(), ids.end()).size() == ids.size());
}

TEST_CASE("ids made on many threads at once are unique" * doctest::timeout(60)) {
  std::vector<std::vector<std::string>> per(4);
  std::vector<std::thread> threads;
  for (auto& v : per)
    threads.emplace_back([&v] {
      for (int i = 0; i < 5000; ++i) v.push_back(new_job_id());
    });
  for (auto& t : threads) t.join();
  std::set<std::string> all;
  for (const auto& v : per) {
    CHECK(std::is_sorted(v.begin(), v.end()));
    all.insert(v.begin(), v.end());
  }
  CHECK(all.size() == 20000);
}
