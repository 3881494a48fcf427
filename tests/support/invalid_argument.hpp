// Test support: check that a call is refused with Error(invalid_argument) whose message names
// `needle` (a job field, a manifest field): the one way a bad input must fail. Header-only.
// Include after <doctest/doctest.h>; undefine LibTorch's CHECK first where LibTorch is included.
#pragma once

#include "runtime/errors.hpp"

#include <string>

namespace vgen::test {

template <typename Fn>
void check_invalid(Fn&& fn, const std::string& needle) {
  try {
    fn();
    DOCTEST_FAIL("expected Error(invalid_argument) mentioning " << needle);
  } catch (const Error& e) {
    DOCTEST_CHECK(e.kind() == ErrorKind::invalid_argument);
    DOCTEST_CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

}  // namespace vgen::test
