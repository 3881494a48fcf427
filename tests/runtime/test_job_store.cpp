#include "runtime/job_store.hpp"

#include "tests/support/job_store_contract.hpp"

#include <doctest/doctest.h>

using namespace vgen;

TEST_CASE("the in-memory store keeps the job store contract") {
  auto store = job_stores().get("memory")({});
  CHECK(store->location() == "memory");
  test::check_job_store_contract([&](bool) -> JobStore& { return *store; });
}

TEST_CASE("the in-memory store lists its jobs newest first, by status, in pages") {
  auto store = job_stores().get("memory")({});
  test::check_job_store_list_contract(*store);
}

TEST_CASE("an unknown store kind names the known ones") {
  try {
    job_stores().get("redis");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("memory") != std::string::npos);
  }
}

TEST_CASE("error_kind_of reads what to_string wrote, and nothing else") {
  JobRecord r;
  r.error_kind = "out_of_memory";
  CHECK(error_kind_of(r) == ErrorKind::out_of_memory);
  r.error_kind = "";
  CHECK_FALSE(error_kind_of(r));
  r.error_kind = "weird";
  CHECK_FALSE(error_kind_of(r));
}
