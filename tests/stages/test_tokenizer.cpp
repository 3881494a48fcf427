#include "stages/tokenizer.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "runtime/errors.hpp"

using namespace vgen;
namespace fs = std::filesystem;

namespace {

// Runs tools/reference/tokenizer_reference.py with the tooling Python; nullopt when the
// suite was configured without it.
std::optional<nlohmann::json> python_reference(const fs::path& dir) {
  const char* py = std::getenv("VGEN_PYTHON");
  const char* src = std::getenv("VGEN_SOURCE_DIR");
  if (!py || !*py || !src) return std::nullopt;
  const std::string cmd = std::string(py) + " " + src + "/tools/reference/tokenizer_reference.py " + dir.string();
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  std::array<char, 4096> buf{};
  while (auto n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  REQUIRE(pclose(pipe) == 0);
  return nlohmann::json::parse(out);
}

fs::path temp_dir() {
  auto d = fs::temp_directory_path() / ("vgen-tok-" + std::to_string(std::random_device{}()));
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST_CASE("C++ SentencePiece ids equal Python sentencepiece's, with T5 EOS and padding") {
  const auto dir = temp_dir();
  auto ref = python_reference(dir);
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
  const auto dir = temp_dir();
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
