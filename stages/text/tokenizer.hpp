// Tokenizer: SentencePiece in C++, as the UMT5 tokenizer of Wan 2.1 is, with T5 conventions:
// pieces -> ids, truncated to max_length - 1, then EOS appended, then padded with pad_id to
// max_length; the attention mask marks the real tokens (EOS included).
//
// Ownership: a Tokenizer owns its SentencePiece model; load once and share.
// Thread-safety: encode()/encode_batch() are const and safe from any thread.
// Errors: a missing or corrupt model file -> Error(invalid_argument) naming the file;
// text that is not valid UTF-8 -> Error(invalid_argument) naming the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece { class SentencePieceProcessor; }

namespace vgen {

struct TokenizerOptions {
  int max_length = 512;
  int pad_id = 0;
  int eos_id = 1;
  bool add_eos = true;
};

struct TokenizedBatch {
  int batch = 0, length = 0;
  std::vector<std::int64_t> ids;   // [batch, length], row-major
  std::vector<std::int64_t> mask;  // [batch, length], 1 for real tokens
  std::vector<int> lengths;        // real tokens per row
};

bool is_valid_utf8(std::string_view s) noexcept;

class Tokenizer {
 public:
  static std::shared_ptr<const Tokenizer> load(const std::filesystem::path& model_file, TokenizerOptions options);
  ~Tokenizer();

  // `field` names the input in error messages ("prompt", "negative_prompt").
  TokenizedBatch encode_batch(const std::vector<std::string>& texts, std::string_view field = "prompt") const;
  std::vector<int> encode_ids(std::string_view text) const;  // raw pieces, no EOS, no padding
  int vocab_size() const;
  const TokenizerOptions& options() const noexcept { return options_; }

 private:
  Tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, TokenizerOptions options);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  TokenizerOptions options_;
};

}  // namespace vgen
