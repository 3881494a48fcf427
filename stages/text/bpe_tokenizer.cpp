#include "stages/text/bpe_tokenizer.hpp"

#include "runtime/errors.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <fstream>
#include <sstream>

namespace vgen {

namespace json = boost::json;

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

namespace {

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, "tokenizer " + file.string() + ": " + what);
}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for U+0100 + n in
// byte order; each as UTF-8.
const std::array<std::string, 256>& byte_chars() {
  static const auto table = [] {
    std::array<std::string, 256> t;
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const int cp = printable(b) ? b : next++;
      std::string s;
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {  // < 0x800 here
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      t[static_cast<std::size_t>(b)] = std::move(s);
    }
    return t;
  }();
  return table;
}

std::string nfc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const auto* norm = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) throw_error(ErrorKind::internal, "tokenizer: ICU's NFC normaliser is unavailable");
  const auto in = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  const auto out = norm->normalize(in, status);
  if (U_FAILURE(status)) throw_error(ErrorKind::internal, "tokenizer: NFC normalisation failed");
  std::string s;
  out.toUTF8String(s);
  return s;
}

const json::object* object_or_null(const json::value* v) { return v && v->is_object() ? &v->get_object() : nullptr; }

std::string type_of(const json::object& o) {
  const auto* t = o.if_contains("type");
  return t && t->is_string() ? std::string(t->get_string()) : std::string();
}

}  // namespace

BpeTokenizer::~BpeTokenizer() = default;

std::shared_ptr<const BpeTokenizer> BpeTokenizer::load(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw_error(ErrorKind::invalid_argument, "tokenizer " + file.string() + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  const auto doc = json::parse(text.str(), ec);
  if (ec || !doc.is_object()) refuse(file, "not a JSON object (" + ec.message() + ")");
  const auto& root = doc.get_object();
  std::shared_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->file_ = file;

  const auto* model = object_or_null(root.if_contains("model"));
  if (!model || type_of(*model) != "BPE") refuse(file, "model.type must be \"BPE\"");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"}) {
    const auto* v = model->if_contains(key);
    if (v && !v->is_null() && !(v->is_string() && v->get_string().empty()))
      refuse(file, std::string("model.") + key + " is not supported");
  }
  if (const auto* v = model->if_contains("byte_fallback"); v && v->is_bool() && v->get_bool())
    refuse(file, "model.byte_fallback is not supported (byte-level BPE needs none)");
  if (const auto* v = model->if_contains("ignore_merges"); v && v->is_bool()) t->ignore_merges_ = v->get_bool();
  const auto* vocab = object_or_null(model->if_contains("vocab"));
  if (!vocab) refuse(file, "model.vocab must be an object");
  for (const auto& kv : *vocab) {
    if (!kv.value().is_int64()) refuse(file, "model.vocab values must be integers");
    const int id = static_cast<int>(kv.value().get_int64());
    t->vocab_.emplace(std::string(kv.key()), id);
    t->vocab_size_ = std::max(t->vocab_size_, id + 1);
  }
  const auto* merges = model->if_contains("merges");
  if (!merges || !merges->is_array()) refuse(file, "model.merges must be an array");
  int rank = 0;
  for (const auto& m : merges->get_array()) {
    if (m.is_string()) {  // "left right" (older files)
      t->merge_rank_.emplace(std::string(m.get_string()), rank++);
    } else if (m.is_array() && m.get_array().size() == 2 && m.get_array()[0].is_string() && m.get_array()[1].is_string()) {
      const auto& p = m.get_array();
      t->merge_rank_.emplace(std::string(p[0].get_string()) + " " + std::string(p[1].get_string()), rank++);
    } else {
      refuse(file, "model.merges entries must be \"a b\" or [a, b]");
    }
  }

  if (const auto* added = root.if_contains("added_tokens"); added && added->is_array()) {
    for (const auto& a : added->get_array()) {
      const auto* o = object_or_null(&a);
      if (!o || !o->if_contains("content") || !o->at("content").is_string() || !o->if_contains("id"))
        refuse(file, "added_tokens entries need content and id");
      for (const char* key : {"lstrip", "rstrip", "single_word"})
        if (const auto* v = o->if_contains(key); v && v->is_bool() && v->get_bool())
          refuse(file, std::string("added token ") + std::string(o->at("content").get_string()) + ": " + key + " is not supported");
      const int id = static_cast<int>(o->at("id").to_number<std::int64_t>());
      t->added_.emplace_back(std::string(o->at("content").get_string()), id);
      t->vocab_size_ = std::max(t->vocab_size_, id + 1);
    }
  }
  // Longest first: at one position the longest added token wins (leftmost-longest).
  std::stable_sort(t->added_.begin(), t->added_.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

  const auto* norm = root.if_contains("normalizer");
  if (norm && !norm->is_null()) {
    const auto* o = object_or_null(norm);
    std::vector<const json::object*> parts;
    if (o && type_of(*o) == "Sequence" && o->if_contains("normalizers") && o->at("normalizers").is_array()) {
      for (const auto& n : o->at("normalizers").get_array()) parts.push_back(object_or_null(&n));
    } else {
      parts.push_back(o);
    }
    for (const auto* p : parts) {
      if (!p || type_of(*p) != "NFC") refuse(file, "normalizer " + (p ? type_of(*p) : std::string("?")) + " is not supported (NFC only)");
      t->nfc_ = true;
    }
  }

  const auto* pre = object_or_null(root.if_contains("pre_tokenizer"));
  if (!pre) refuse(file, "pre_tokenizer is missing (byte-level BPE needs ByteLevel)");
  std::vector<const json::object*> steps;
  if (type_of(*pre) == "Sequence" && pre->if_contains("pretokenizers") && pre->at("pretokenizers").is_array()) {
    for (const auto& p : pre->at("pretokenizers").get_array()) steps.push_back(object_or_null(&p));
  } else {
    steps.push_back(pre);
  }
  bool byte_level = false;
  for (const auto* s : steps) {
    const auto type = s ? type_of(*s) : std::string();
    if (type == "Split" && !byte_level && !t->split_) {
      const auto* pattern = object_or_null(s->if_contains("pattern"));
      const auto* regex = pattern ? pattern->if_contains("Regex") : nullptr;
      if (!regex || !regex->is_string()) refuse(file, "pre_tokenizer Split: pattern.Regex is missing (String patterns are not supported)");
      const auto* behavior = s->if_contains("behavior");
      if (!behavior || !behavior->is_string() || behavior->get_string() != "Isolated") refuse(file, "pre_tokenizer Split: behavior must be Isolated");
      if (const auto* inv = s->if_contains("invert"); inv && inv->is_bool() && inv->get_bool()) refuse(file, "pre_tokenizer Split: invert is not supported");
      int err = 0;
      PCRE2_SIZE at = 0;
      const auto& src = regex->get_string();
      auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(src.data()), src.size(), PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
      if (!code) {
        std::array<PCRE2_UCHAR, 256> msg{};
        pcre2_get_error_message(err, msg.data(), msg.size());
        refuse(file, "pre_tokenizer Split: the regex does not compile at " + std::to_string(at) + ": " +
                         reinterpret_cast<const char*>(msg.data()));
      }
      t->split_ = std::make_unique<Regex>();
      t->split_->code = code;
      pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter serves if it fails
    } else if (type == "ByteLevel" && !byte_level) {
      for (const char* key : {"add_prefix_space", "use_regex"})
        if (const auto* v = s->if_contains(key); v && v->is_bool() && v->get_bool())
          refuse(file, std::string("pre_tokenizer ByteLevel: ") + key + "=true is not supported");
      byte_level = true;
    } else {
      refuse(file, "pre_tokenizer " + (type.empty() ? std::string("?") : type) +
                       " is not supported (Split(regex, Isolated) then ByteLevel)");
    }
  }
  if (!byte_level) refuse(file, "pre_tokenizer must end with ByteLevel");
  return t;
}

std::optional<int> BpeTokenizer::token_id(std::string_view token) const {
  for (const auto& [content, id] : added_)
    if (content == token) return id;
  if (auto it = vocab_.find(std::string(token)); it != vocab_.end()) return it->second;
  return std::nullopt;
}

// One byte-level word: its characters, merged lowest rank first (leftmost on a tie), every
// occurrence of the pair in one left-to-right pass, as `tokenizers`' Word::merge_all ends up.
void BpeTokenizer::bpe(const std::string& word, std::vector<int>& ids) const {
  if (ignore_merges_)
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < word.size();) {  // UTF-8 characters (byte-level: 1 or 2 bytes)
    std::size_t n = 1;
    const auto c = static_cast<unsigned char>(word[i]);
    if (c >= 0xF0) n = 4; else if (c >= 0xE0) n = 3; else if (c >= 0xC0) n = 2;
    parts.push_back(word.substr(i, n));
    i += n;
  }
  while (parts.size() > 1) {
    int best = INT_MAX;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto it = merge_rank_.find(parts[i] + " " + parts[i + 1]);
      if (it != merge_rank_.end() && it->second < best) best = it->second, at = i;
    }
    if (best == INT_MAX) break;
    const std::string left = parts[at], right = parts[at + 1];
    std::vector<std::string> merged;
    merged.reserve(parts.size());
    for (std::size_t i = 0; i < parts.size();) {
      if (i + 1 < parts.size() && parts[i] == left && parts[i + 1] == right) {
        merged.push_back(left + right);
        i += 2;
      } else {
        merged.push_back(std::move(parts[i++]));
      }
    }
    parts = std::move(merged);
  }
  for (const auto& p : parts) {
    const auto it = vocab_.find(p);
    if (it == vocab_.end()) throw_error(ErrorKind::internal, "tokenizer " + file_.string() + ": piece without an id (unknown token)");
    ids.push_back(it->second);
  }
}

// Text between added tokens: normalise, split by the regex (matches and the gaps between them
// are pieces), map each piece's bytes, BPE.
void BpeTokenizer::add_piece(std::string_view raw, std::vector<int>& ids) const {
  if (raw.empty()) return;
  const std::string text = nfc_ ? nfc(raw) : std::string(raw);
  const auto& chars = byte_chars();
  auto emit = [&](std::size_t begin, std::size_t end) {
    if (begin >= end) return;
    std::string word;
    for (std::size_t i = begin; i < end; ++i) word += chars[static_cast<unsigned char>(text[i])];
    bpe(word, ids);
  };
  if (!split_) return emit(0, text.size());
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(split_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0, gap = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(split_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw_error(ErrorKind::internal, "tokenizer: regex match failed (" + std::to_string(rc) + ")");
    const auto* ov = pcre2_get_ovector_pointer(md.get());
    const std::size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match: step over one character
      pos = begin + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    emit(gap, begin);
    emit(begin, end);
    pos = gap = end;
  }
  emit(gap, text.size());
}

std::vector<int> BpeTokenizer::encode_ids(std::string_view text, std::string_view field) const {
  if (!is_valid_utf8(text)) throw_error(ErrorKind::invalid_argument, std::string(field) + ": not valid UTF-8");
  std::vector<int> ids;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size();) {
    const std::pair<std::string, int>* hit = nullptr;
    for (const auto& a : added_)  // longest first
      if (!a.first.empty() && text.compare(i, a.first.size(), a.first) == 0) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    add_piece(text.substr(start, i - start), ids);
    ids.push_back(hit->second);
    i += hit->first.size();
    start = i;
  }
  add_piece(text.substr(start), ids);
  return ids;
}

TokenizedBatch BpeTokenizer::encode_batch(const std::vector<std::string>& texts, int max_length, int pad_id,
                                          std::string_view field) const {
  if (max_length < 1) throw_error(ErrorKind::invalid_argument, "tokenizer: max_length must be >= 1");
  TokenizedBatch out;
  out.batch = static_cast<int>(texts.size());
  out.length = max_length;
  out.ids.assign(texts.size() * static_cast<std::size_t>(max_length), pad_id);
  out.mask.assign(out.ids.size(), 0);
  for (std::size_t b = 0; b < texts.size(); ++b) {
    auto ids = encode_ids(texts[b], field);
    const std::size_t n = std::min<std::size_t>(ids.size(), static_cast<std::size_t>(max_length));
    for (std::size_t i = 0; i < n; ++i) {
      out.ids[b * max_length + i] = ids[i];
      out.mask[b * max_length + i] = 1;
    }
    out.lengths.push_back(static_cast<int>(n));
  }
  return out;
}

}  // namespace vgen
