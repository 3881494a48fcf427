#include "runtime/registry.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <thread>

using vgen::Error;
using vgen::ErrorKind;
using vgen::Registry;

namespace {
ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::internal;
}
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}
}  // namespace

TEST_CASE("built-ins are present; get returns the entry; names are sorted") {
  Registry<int> r("widget", {{"b", 2}, {"a", 1}});
  CHECK(r.get("a") == 1);
  CHECK(r.get("b") == 2);
  CHECK(r.contains("a"));
  CHECK_FALSE(r.contains("c"));
  CHECK(r.names() == std::vector<std::string>{"a", "b"});
  CHECK(r.known() == "a, b");
  CHECK(r.kind() == "widget");
}

TEST_CASE("a duplicate name is refused the same way for built-ins and later additions") {
  Registry<int> r("scheduler", {{"a", 1}});
  CHECK(kind_of([&] { r.add("a", 5); }) == ErrorKind::invalid_argument);
  CHECK(message_of([&] { r.add("a", 5); }) == "scheduler 'a' is already registered");
  CHECK(r.get("a") == 1);  // the first entry stays
  CHECK_THROWS_AS((Registry<int>("x", {{"d", 1}, {"d", 2}})), Error);
  CHECK(kind_of([&] { r.add("", 1); }) == ErrorKind::invalid_argument);
}

TEST_CASE("an unknown name is an invalid_argument naming the known ones") {
  Registry<std::function<int()>> r("model family", {{"wan", [] { return 1; }}, {"ltx", [] { return 2; }}});
  CHECK(kind_of([&] { r.get("sd"); }) == ErrorKind::invalid_argument);
  CHECK(message_of([&] { r.get("sd"); }) == "unknown model family 'sd' (known: ltx, wan)");
  CHECK_FALSE(r.find("sd").has_value());
  CHECK(r.get("ltx")() == 2);
}

TEST_CASE("concurrent adds and lookups are safe" * doctest::timeout(30)) {
  Registry<int> r("thing");
  std::atomic<int> found{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        r.add("t" + std::to_string(t) + "-" + std::to_string(i), i);
        if (r.find("t0-0")) ++found;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(r.names().size() == 800);
  CHECK(found > 0);
}
