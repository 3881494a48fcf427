#include "stages/text/tokenizer.hpp"

#include <doctest/doctest.h>

#include "tests/support/python_reference.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "runtime/errors.hpp"

using namespace vgen;
namespace fs = std::filesystem;


TEST_CASE("C++ SentencePiece ids equal Python sentencepiece's, with T5 EOS and padding") {
  const auto dir = vgen::test::temp_dir("vgen-test-");
  auto ref = vgen::test::python_reference("tokenizer_reference.py", dir.string());
  if (!ref) {
    WARN_MESSAGE(false, "VGEN_PYTHON not set: skipped the Python comparison");
    return;
  }
  auto tok = Tokenizer::load((*ref)["model"].get<std::string>(), {.max_length = 16, .pad_id = 0, .eos_id = 1});
  CHECK(tok->vocab_size() == (*ref)["vocab"].get<int>());
  for (const auto& c : (*ref)["cases"]) {
    const auto text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int>>();
    CAPTURE(text);
    CHECK(tok->encode_ids(text) == want);
    auto batch = tok->encode_batch({text});
    const std::size_t kept = std::min<std::size_t>(want.size(), 15);
    REQUIRE(batch.lengths[0] == static_cast<int>(kept + 1));
    for (std::size_t i = 0; i < kept; ++i) CHECK(batch.ids[i] == want[i]);
    CHECK(batch.ids[kept] == 1);  // EOS after the (truncated) pieces
    for (std::size_t i = kept + 1; i < 16; ++i) {
      CHECK(batch.ids[i] == 0);
      CHECK(batch.mask[i] == 0);
    }
    CHECK(batch.mask[kept] == 1);
  }
  fs::remove_all(dir);
}

TEST_CASE("bad tokenizer input is reported by name") {
  CHECK_THROWS_AS(Tokenizer::load("/nonexistent/tok.model", {}), Error);
  const auto dir = vgen::test::temp_dir("vgen-test-");
  std::FILE* f = std::fopen((dir / "corrupt.model").c_str(), "wb");
  std::fputs("definitely not a sentencepiece model", f);
  std::fclose(f);
  try {
    Tokenizer::load(dir / "corrupt.model", {});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("corrupt.model") != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("UTF-8 validation") {
  CHECK(is_valid_utf8("plain ascii"));
  CHECK(is_valid_utf8("café 日本語 😀"));
  CHECK_FALSE(is_valid_utf8("\xff"));
  CHECK_FALSE(is_valid_utf8("\xc3"));              // truncated
  CHECK_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong
  CHECK_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate
  CHECK_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}
