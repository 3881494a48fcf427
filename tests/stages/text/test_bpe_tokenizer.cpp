#include "stages/text/bpe_tokenizer.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "tests/support/python_reference.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace vgen;
namespace fs = std::filesystem;

TEST_CASE("C++ byte-level BPE ids equal HF tokenizers' on a few hundred strings") {
  const auto dir = vgen::test::temp_dir("vgen-bpe-");
  auto ref = vgen::test::python_reference("bpe_tokenizer_reference.py", dir.string());
  if (!ref) {
    WARN_MESSAGE(false, "VGEN_PYTHON not set: skipped the Python comparison");
    return;
  }
  auto tok = BpeTokenizer::load((*ref)["tokenizer"].get<std::string>());
  CHECK(tok->vocab_size() == (*ref)["vocab"].get<int>());
  CHECK(tok->token_id("<|im_start|>").has_value());
  const auto& cases = (*ref)["cases"];
  REQUIRE(cases.size() >= 300);
  int mismatches = 0;
  for (const auto& c : cases) {
    const auto text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int>>();
    const auto got = tok->encode_ids(text);
    if (got != want) ++mismatches;
    CAPTURE(text);
    CHECK(got == want);
  }
  CHECK(mismatches == 0);

  // Truncation and right padding (what the family feeds the text encoder).
  const int pad = (*ref)["pad_id"].get<int>();
  const auto first = cases[0]["ids"].get<std::vector<int>>();
  REQUIRE(first.size() > 4);
  auto batch = tok->encode_batch({cases[0]["text"].get<std::string>(), ""}, 4, pad);
  CHECK(batch.batch == 2);
  CHECK(batch.lengths == std::vector<int>{4, 0});
  for (int i = 0; i < 4; ++i) {
    CHECK(batch.ids[i] == first[i]);
    CHECK(batch.mask[i] == 1);
    CHECK(batch.ids[4 + i] == pad);
    CHECK(batch.mask[4 + i] == 0);
  }
  fs::remove_all(dir);
}

namespace {

fs::path write(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return dir / name;
}

std::string load_error(const fs::path& file) {
  try {
    BpeTokenizer::load(file);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
  return "";
}

const char* kByteLevel = R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})";

}  // namespace

TEST_CASE("what the tokenizer cannot reproduce is refused by name, with the file") {
  const auto dir = vgen::test::temp_dir("vgen-bpe-bad-");
  CHECK(load_error(dir / "missing.json").find("missing.json") != std::string::npos);
  CHECK(load_error(write(dir, "garbage.json", "not json")).find("garbage.json") != std::string::npos);
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";
  CHECK(load_error(write(dir, "wp.json", R"({"model": {"type": "WordPiece", "vocab": {}}})")).find("model.type") != std::string::npos);
  CHECK(load_error(write(dir, "nfkc.json", "{" + model + R"(, "normalizer": {"type": "NFKC"}, )" + kByteLevel + "}"))
            .find("NFKC") != std::string::npos);
  CHECK(load_error(write(dir, "meta.json", "{" + model + R"(, "pre_tokenizer": {"type": "Metaspace"}})")).find("Metaspace") !=
        std::string::npos);
  CHECK(load_error(write(dir, "regex.json", "{" + model +
                                               R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split",
        "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel"}]}})"))
            .find("regex") != std::string::npos);
  CHECK(load_error(write(dir, "lstrip.json", "{" + model + R"(, "added_tokens": [{"id": 3, "content": "<x>", "lstrip": true}], )" +
                                                kByteLevel + "}"))
            .find("lstrip") != std::string::npos);

  // A minimal accepted file: merges apply, and text that is not UTF-8 is refused by field.
  auto ok = BpeTokenizer::load(write(dir, "ok.json", "{" + model + ", " + kByteLevel + "}"));
  CHECK(ok->encode_ids("ab") == std::vector<int>{2});
  CHECK(ok->encode_ids("ba") == std::vector<int>{1, 0});
  try {
    ok->encode_ids("a\xff", "negative_prompt");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("negative_prompt") != std::string::npos);
  }
  fs::remove_all(dir);
}
