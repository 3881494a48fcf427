#include "stages/text/tokenizer.hpp"

#include "runtime/errors.hpp"

#include <sentencepiece_processor.h>

namespace vgen {

bool is_valid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
    else return false;
    for (std::size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

Tokenizer::Tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, TokenizerOptions options)
    : sp_(std::move(sp)), options_(options) {}
Tokenizer::~Tokenizer() = default;

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::filesystem::path& model_file, TokenizerOptions options) {
  if (options.max_length < 2) throw_error(ErrorKind::invalid_argument, "tokenizer: max_length must be >= 2");
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(model_file.string());
  if (!status.ok())
    throw_error(ErrorKind::invalid_argument,
                "tokenizer model '" + model_file.string() + "' cannot be loaded: " + status.ToString());
  const int vocab = sp->GetPieceSize();
  for (auto [name, id] : {std::pair{"pad_id", options.pad_id}, std::pair{"eos_id", options.eos_id}})
    if (id < 0 || id >= vocab)
      throw_error(ErrorKind::invalid_argument, std::string("tokenizer: ") + name + " " + std::to_string(id) +
                                                   " is outside the vocabulary (" + std::to_string(vocab) + ")");
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(sp), options));
}

std::vector<int> Tokenizer::encode_ids(std::string_view text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw_error(ErrorKind::internal, "tokenizer: " + status.ToString());
  return ids;
}

TokenizedBatch Tokenizer::encode_batch(const std::vector<std::string>& texts, std::string_view field) const {
  TokenizedBatch out;
  out.batch = static_cast<int>(texts.size());
  out.length = options_.max_length;
  out.ids.assign(texts.size() * options_.max_length, options_.pad_id);
  out.mask.assign(texts.size() * options_.max_length, 0);
  for (std::size_t b = 0; b < texts.size(); ++b) {
    if (!is_valid_utf8(texts[b])) throw_error(ErrorKind::invalid_argument, std::string(field) + ": not valid UTF-8");
    auto ids = encode_ids(texts[b]);
    const std::size_t room = static_cast<std::size_t>(options_.max_length) - (options_.add_eos ? 1 : 0);
    if (ids.size() > room) ids.resize(room);
    if (options_.add_eos) ids.push_back(options_.eos_id);
    auto* row = &out.ids[b * options_.max_length];
    auto* mask = &out.mask[b * options_.max_length];
    for (std::size_t i = 0; i < ids.size(); ++i) {
      row[i] = ids[i];
      mask[i] = 1;
    }
    out.lengths.push_back(static_cast<int>(ids.size()));
  }
  return out;
}

int Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }

}  // namespace vgen
