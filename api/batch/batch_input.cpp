#include "api/batch/batch_input.hpp"

#include "runtime/errors.hpp"
#include "runtime/output_lock.hpp"
#include "stages/media/encode.hpp"
#include "stages/job_spec.hpp"
#include "stages/text/tokenizer.hpp"

#include <boost/json.hpp>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

namespace vgen {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr std::string_view utf8_bom = "\xEF\xBB\xBF";

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// "0007-a-red-circle-moving-left": the line number keeps names unique and sorted.
std::string default_name(int line, const std::string& prompt) {
  char num[16];
  std::snprintf(num, sizeof num, "%04d", line);
  std::string slug;
  for (unsigned char c : prompt) {
    if (slug.size() >= 48) break;
    if (std::isalnum(c)) slug += static_cast<char>(std::tolower(c));
    else if (!slug.empty() && slug.back() != '-') slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? num : std::string(num) + "-" + slug;
}

// Relative "image"/"last_image"/"video"/"mask_video"/"reference_images" paths name files beside
// the prompt file; the job carries them absolute (stages/job_spec.hpp), so that neither the
// Runtime's nor a resumed journal's working directory matters.
void resolve_images(json::object& spec, const fs::path& base_dir) {
  auto resolve = [&](json::value& v) {
    if (!v.is_string() || v.get_string().empty()) return;  // wrong types: named at validation
    const fs::path path(std::string(v.get_string()));
    if (path.is_relative()) v = (base_dir / path).lexically_normal().string();
  };
  for (const char* field : {"image", "last_image", "video", "mask_video"})
    if (auto* v = spec.if_contains(field)) resolve(*v);
  if (auto* refs = spec.if_contains("reference_images"); refs && refs->is_array())
    for (auto& r : refs->get_array()) resolve(r);
}

BatchItem parse_line(int line, const std::string& text, bool jsonl, const json::object& defaults, const fs::path& base_dir) {
  BatchItem item;
  item.line = line;
  item.spec = defaults;
  try {
    if (!is_valid_utf8(text)) throw_error(ErrorKind::invalid_argument, "not valid UTF-8");
    if (jsonl) {
      boost::system::error_code ec;
      auto v = json::parse(text, ec);
      if (ec) throw_error(ErrorKind::invalid_argument, "not valid JSON (" + ec.message() + ")");
      if (!v.is_object()) throw_error(ErrorKind::invalid_argument, "must be a JSON object (one job per line)");
      for (const auto& kv : v.get_object()) item.spec[kv.key()] = kv.value();
      resolve_images(item.spec, base_dir);
    } else {
      item.spec["prompt"] = text;
    }
    if (const auto* n = item.spec.if_contains("name"); n && n->is_string()) {
      item.name = checked_output_name(std::string(n->get_string()));
    } else if (!item.spec.contains("name")) {
      const auto* p = item.spec.if_contains("prompt");
      item.name = default_name(line, p && p->is_string() ? std::string(p->get_string()) : "");
      item.spec["name"] = item.name;
    }
  } catch (const std::exception& e) {
    item.error = e.what();
  }
  return item;
}

}  // namespace

BatchReader::BatchReader(std::unique_ptr<std::istream> in, json::object defaults, bool jsonl, std::string origin,
                         std::size_t max_line_bytes)
    : in_(std::move(in)), defaults_(std::move(defaults)), jsonl_(jsonl), origin_(std::move(origin)),
      max_line_bytes_(max_line_bytes) {
  std::error_code ec;
  base_dir_ = fs::current_path(ec);  // empty if the working directory is gone: paths stay relative, refused at validation
}

BatchReader BatchReader::open_file(const fs::path& file, json::object defaults) {
  const auto origin = "prompt file '" + file.string() + "'";
  auto in = std::make_unique<std::ifstream>(file, std::ios::binary);
  std::error_code ec;
  if (!*in || fs::is_directory(file, ec)) throw_error(ErrorKind::invalid_argument, origin + " cannot be read");
  BatchReader reader(std::move(in), std::move(defaults), file.extension() == ".jsonl", origin);
  reader.base_dir_ = fs::absolute(file).parent_path();
  return reader;
}

// One line into line_ without its '\n', keeping at most max_line_bytes_ of it (too_long_ says
// the rest was dropped). Reads through the stream buffer so that memory stays one line.
bool BatchReader::read_line() {
  line_.clear();
  too_long_ = false;
  auto* buf = in_->rdbuf();
  bool any = false;
  for (;;) {
    const int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) break;
    if (!any) ++line_number_;
    any = true;
    if (c == '\n') break;
    if (c == '\0')
      throw_error(ErrorKind::invalid_argument,
                  origin_ + " is not a text file (a NUL byte on line " + std::to_string(line_number_) + ")");
    if (line_.size() < max_line_bytes_) line_.push_back(static_cast<char>(c));
    else too_long_ = true;
  }
  if (line_number_ == 1 && any && line_.rfind(utf8_bom, 0) == 0) line_.erase(0, utf8_bom.size());
  return any;
}

std::optional<BatchItem> BatchReader::next() {
  if (peeked_) {
    auto item = std::move(*peeked_);
    peeked_.reset();
    return item;
  }
  return read_item();
}

const BatchItem* BatchReader::peek() {
  if (!peeked_) peeked_ = read_item();
  return *peeked_ ? &**peeked_ : nullptr;
}

std::optional<BatchItem> BatchReader::read_item() {
  while (read_line()) {
    const auto t = trim(line_);
    if (t.empty() || t[0] == '#') continue;
    if (!detected_jsonl_) detected_jsonl_ = jsonl_ || t[0] == '{';
    ++items_;
    if (too_long_) {
      BatchItem item;
      item.line = line_number_;
      item.error = "longer than " + std::to_string(max_line_bytes_) + " bytes (the limit for one line)";
      return item;
    }
    auto item = parse_line(line_number_, std::string(t), *detected_jsonl_, defaults_, base_dir_);
    if (item.error.empty()) check_output_name(item);
    return item;
  }
  if (items_ == 0) throw_error(ErrorKind::invalid_argument, origin_ + " holds no prompt");
  return std::nullopt;
}

// The file the item writes must be its own: not the summary's or the lock's, and not one an
// earlier line writes (the same name, or "clip" as mp4 against "clip.mp4" as png).
void BatchReader::check_output_name(BatchItem& item) {
  if (item.name.empty()) return;  // a "name" that is no string: the runtime refuses it
  const auto* f = item.spec.if_contains("format");
  const std::string format = f && f->is_string() ? std::string(f->get_string()) : JobSpec{}.format;
  std::string ext;
  try {
    ext = extension_for(format);
  } catch (const Error&) {
    return;  // an unknown format: the runtime refuses the job against the model's formats
  }
  const auto output = item.name + ext;
  if (output == batch_summary_name || output == OutputLock::file_name) {
    item.error = "name: '" + item.name + "' is reserved: its output '" + output + "' is the batch's own file";
    return;
  }
  const auto [it, fresh] = outputs_.emplace(output, OutputOwner{item.line, item.name.size()});
  if (fresh) return;
  // Same output and same name length: the same name (the name is the output's prefix).
  if (it->second.name_size == item.name.size())
    item.error = "name: '" + item.name + "' is already used by line " + std::to_string(it->second.line);
  else
    item.error = "name: '" + item.name + "' (" + format + ") would write '" + output + "', the output of line " +
                 std::to_string(it->second.line);
}

std::vector<BatchItem> parse_batch_text(std::string_view text, const json::object& defaults, bool jsonl,
                                        const std::string& origin) {
  BatchReader reader(std::make_unique<std::istringstream>(std::string(text)), defaults, jsonl, origin);
  std::vector<BatchItem> items;
  while (auto item = reader.next()) items.push_back(std::move(*item));
  return items;
}

}  // namespace vgen
