#include "api/batch_input.hpp"

#include "runtime/errors.hpp"
#include "stages/job_spec.hpp"
#include "stages/tokenizer.hpp"

#include <boost/json.hpp>

#include <cctype>
#include <cstdio>
#include <map>
#include <utility>

namespace vgen {

namespace json = boost::json;

namespace {

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

BatchItem parse_line(int line, const std::string& text, bool jsonl, const json::object& defaults) {
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

std::vector<BatchItem> parse_batch_text(std::string_view text, const json::object& defaults, bool jsonl,
                                        const std::string& origin) {
  std::vector<std::pair<int, std::string>> lines;
  for (int n = 1; !text.empty(); ++n) {  // as std::getline: no empty line after a final '\n'
    const auto nl = text.find('\n');
    const auto t = trim(text.substr(0, nl));
    if (!t.empty() && t[0] != '#') lines.emplace_back(n, std::string(t));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  }
  if (lines.empty()) throw_error(ErrorKind::invalid_argument, origin + " holds no prompt");
  jsonl = jsonl || lines.front().second[0] == '{';
  std::vector<BatchItem> items;
  std::map<std::string, int> names;
  for (const auto& [n, t] : lines) {
    auto item = parse_line(n, t, jsonl, defaults);
    if (item.error.empty()) {
      auto [it, fresh] = names.emplace(item.name, n);
      if (!fresh) item.error = "name: '" + item.name + "' is already used by line " + std::to_string(it->second);
    }
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace vgen
