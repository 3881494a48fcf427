// BpeTokenizer: a Hugging Face tokenizer.json with a byte-level BPE model (Qwen 2 / 2.5, GPT-2
// style), as the `tokenizers` library encodes text with add_special_tokens=False:
//   added tokens  the file's added_tokens (<|im_start|>, ...) are cut out of the raw text first,
//                 longest match at each position, and keep their own ids;
//   normaliser    none or NFC (ICU);
//   pre-tokenizer Split(regex, Isolated) with the file's pattern (PCRE2, UTF + Unicode
//                 properties), then ByteLevel (bytes -> GPT-2's printable characters, no prefix
//                 space, no second regex);
//   model         BPE: each piece's characters merged by the lowest-ranked merge first
//                 (ignore_merges: a piece already in the vocabulary is one token).
// No post-processor is applied (HunyuanVideo 1.5 tokenizes its chat template without special
// tokens); truncation and right padding are encode_batch's. Anything else in the file (another
// model, normaliser or pre-tokenizer, added tokens with lstrip/rstrip/single_word, byte
// fallback, a subword prefix) is refused when loading, by name. No Debian package reads
// tokenizer.json from C++ (bookworm has sentencepiece only), hence this component.
//
// Ownership: a BpeTokenizer owns its vocabulary, merges and compiled regex; load once, share.
// Thread-safety: encode_ids()/encode_batch() are const and safe from any thread (PCRE2 match
// data is per call). Blocks only on load (reads the file). Not cancellable (bounded work).
// Errors: a missing, unreadable or unsupported file -> Error(invalid_argument) naming the file
// and the field; text that is not valid UTF-8 -> Error(invalid_argument) naming the input.
#pragma once

#include "stages/text/tokenizer.hpp"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vgen {

class BpeTokenizer {
 public:
  static std::shared_ptr<const BpeTokenizer> load(const std::filesystem::path& tokenizer_json);
  ~BpeTokenizer();
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  // The ids of `text` (`field` names it in errors: "prompt", "negative_prompt").
  std::vector<int> encode_ids(std::string_view text, std::string_view field = "prompt") const;
  // Each text's ids cut to max_length and right-padded with pad_id; mask 1 on real tokens.
  TokenizedBatch encode_batch(const std::vector<std::string>& texts, int max_length, int pad_id,
                              std::string_view field = "prompt") const;
  std::optional<int> token_id(std::string_view token) const;  // vocabulary or added token
  int vocab_size() const noexcept { return vocab_size_; }

 private:
  struct Regex;
  BpeTokenizer() = default;
  void add_piece(std::string_view piece, std::vector<int>& ids) const;  // pre-tokenize, BPE
  void bpe(const std::string& word, std::vector<int>& ids) const;       // one byte-level word

  std::filesystem::path file_;
  std::unordered_map<std::string, int> vocab_;
  std::unordered_map<std::string, int> merge_rank_;  // "left right" -> rank
  std::vector<std::pair<std::string, int>> added_;  // content, id
  std::unique_ptr<Regex> split_;                     // null: no Split pre-tokenizer
  bool nfc_ = false, ignore_merges_ = false;
  int vocab_size_ = 0;
};

}  // namespace vgen
