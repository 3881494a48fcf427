#include "runtime/host_memory.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

using namespace vgen;

namespace {

// Sets an environment variable for one test case and restores the previous value after it.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    if (value) ::setenv(name.c_str(), value, 1);
    else ::unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("parse_mem_available reads the MemAvailable line in bytes") {
  const std::string meminfo =
      "MemTotal:       24598236 kB\nMemFree:        16003612 kB\nMemAvailable:   21871236 kB\nBuffers:  1 kB\n";
  CHECK(parse_mem_available(meminfo) == 21871236ull * 1024);
  CHECK(parse_mem_available("MemTotal: 5 kB\n") == std::nullopt);
  CHECK(parse_mem_available("MemAvailable: lots kB\n") == std::nullopt);
  CHECK(parse_mem_available("MemAvailable: 12 MB\n") == std::nullopt);
  CHECK(parse_mem_available("MemAvailable: 7 kB") == 7168u);  // no trailing newline
  CHECK(parse_mem_available("") == std::nullopt);
}

TEST_CASE("the real /proc/meminfo gives a plausible figure") {
  ScopedEnv env("VGEN_MEMORY_AVAILABLE", nullptr);
  const auto a = available_memory_bytes();
  REQUIRE(a.has_value());  // the project builds and tests on Linux
  CHECK(*a > (16ull << 20));
}

TEST_CASE("VGEN_MEMORY_AVAILABLE replaces MemAvailable; garbage is refused naming it") {
  {
    ScopedEnv env("VGEN_MEMORY_AVAILABLE", "1234");
    CHECK(available_memory_bytes() == 1234u);
  }
  ScopedEnv env("VGEN_MEMORY_AVAILABLE", "12GB");
  try {
    (void)available_memory_bytes();
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("VGEN_MEMORY_AVAILABLE") != std::string::npos);
  }
}

TEST_CASE("check_fits_in_memory refuses a file larger than the memory left, naming it and both sizes") {
  CHECK_NOTHROW(check_fits_in_memory("model file 'transformer.pt'", 1000, 1000));
  CHECK_NOTHROW(check_fits_in_memory("model file 'transformer.pt'", 5'680'000'000ull, std::nullopt));
  try {
    check_fits_in_memory("model file 'transformer.pt'", 5'680'000'000ull, 3'200'000'000ull);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(exit_code_for(e.kind()) == 2);
    const std::string m = e.what();
    CHECK(m.find("transformer.pt") != std::string::npos);
    CHECK(m.find("5.68 GB") != std::string::npos);
    CHECK(m.find("3.20 GB") != std::string::npos);
  }
}

TEST_CASE("format_bytes picks a readable unit") {
  CHECK(format_bytes(12) == "12 bytes");
  CHECK(format_bytes(17'400) == "17 kB");
  CHECK(format_bytes(812'300'000) == "812 MB");
  CHECK(format_bytes(5'680'000'000ull) == "5.68 GB");
}
