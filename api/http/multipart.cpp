#include "api/http/multipart.hpp"

#include "runtime/errors.hpp"

#include <algorithm>
#include <cctype>

namespace vgen {

namespace {

[[noreturn]] void bad(const std::string& what) { throw_error(ErrorKind::invalid_argument, "multipart: " + what); }

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of parameter `key` in "type; a=b; key="v"" (quotes removed, \" and \\ unescaped);
// `found` tells whether it was there.
std::string parameter(std::string_view header, std::string_view key, bool& found) {
  found = false;
  std::size_t i = header.find(';');
  while (i != std::string_view::npos) {
    ++i;
    while (i < header.size() && (header[i] == ' ' || header[i] == '\t')) ++i;
    const auto eq = header.find('=', i);
    if (eq == std::string_view::npos) return {};
    const auto name = trim(header.substr(i, eq - i));
    std::size_t j = eq + 1;
    std::string value;
    if (j < header.size() && header[j] == '"') {
      ++j;
      while (j < header.size() && header[j] != '"') {
        if (header[j] == '\\' && j + 1 < header.size()) ++j;
        value += header[j++];
      }
      if (j >= header.size()) bad("unterminated quoted parameter '" + std::string(name) + "'");
      ++j;
      i = header.find(';', j);
    } else {
      const auto end = header.find(';', j);
      value = std::string(trim(header.substr(j, end == std::string_view::npos ? std::string_view::npos : end - j)));
      i = end;
    }
    if (iequal(name, key)) {
      found = true;
      return value;
    }
  }
  return {};
}

void parse_headers(std::string_view block, MultipartPart& part) {
  bool form_data = false;
  while (!block.empty()) {
    const auto eol = block.find("\r\n");
    const auto line = block.substr(0, eol);
    block = eol == std::string_view::npos ? std::string_view{} : block.substr(eol + 2);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) bad("a part's header line has no ':'");
    const auto name = trim(line.substr(0, colon));
    const auto value = trim(line.substr(colon + 1));
    if (iequal(name, "Content-Disposition")) {
      const auto type = trim(value.substr(0, value.find(';')));
      if (!iequal(type, "form-data")) bad("a part's Content-Disposition is not form-data");
      bool found = false;
      part.name = parameter(value, "name", found);
      if (!found || part.name.empty()) bad("a part has no field name");
      part.filename = parameter(value, "filename", found);
      form_data = true;
    } else if (iequal(name, "Content-Type")) {
      part.content_type = std::string(value);
    }
  }
  if (!form_data) bad("a part has no Content-Disposition header");
}

}  // namespace

std::string multipart_boundary(std::string_view content_type) {
  const auto type = trim(content_type.substr(0, content_type.find(';')));
  if (!iequal(type, "multipart/form-data")) bad("Content-Type is not multipart/form-data");
  bool found = false;
  auto boundary = parameter(content_type, "boundary", found);
  if (!found || boundary.empty() || boundary.size() > 70) bad("Content-Type needs a boundary of 1-70 characters");
  return boundary;
}

std::vector<MultipartPart> parse_multipart(std::string_view body, std::string_view boundary, const MultipartLimits& limits) {
  if (boundary.empty()) bad("empty boundary");
  const std::string first = "--" + std::string(boundary);
  const std::string delimiter = "\r\n" + first;
  // The first delimiter may start the body or follow a preamble (then after a CRLF).
  std::size_t at;
  if (body.starts_with(first)) {
    at = first.size();
  } else {
    const auto d = body.find(delimiter);
    if (d == std::string_view::npos) bad("no part (the boundary never appears)");
    at = d + delimiter.size();
  }
  std::vector<MultipartPart> parts;
  for (;;) {
    // After a delimiter: "--" closes the body; else transport padding and a CRLF.
    if (body.substr(at, 2) == "--") return parts;
    while (at < body.size() && (body[at] == ' ' || body[at] == '\t')) ++at;
    if (body.substr(at, 2) != "\r\n") bad("truncated or malformed body (no line end after a boundary)");
    at += 2;
    if (parts.size() == limits.max_parts) bad("more than " + std::to_string(limits.max_parts) + " parts");
    const auto headers_end = body.find("\r\n\r\n", at);
    const bool no_headers = body.substr(at, 2) == "\r\n";
    if (!no_headers && (headers_end == std::string_view::npos || headers_end - at > limits.max_header_bytes)) {
      if (headers_end == std::string_view::npos && body.size() - at <= limits.max_header_bytes)
        bad("truncated body (a part's headers never end)");
      bad("a part's headers are longer than " + std::to_string(limits.max_header_bytes) + " bytes");
    }
    MultipartPart part;
    parse_headers(no_headers ? std::string_view{} : body.substr(at, headers_end - at), part);
    const std::size_t content = no_headers ? at + 2 : headers_end + 4;
    const auto end = body.find(delimiter, content);
    if (end == std::string_view::npos) bad("truncated body (no closing boundary after field '" + part.name + "')");
    part.body = body.substr(content, end - content);
    if (find_part(parts, part.name)) bad("field '" + part.name + "' given twice");
    parts.push_back(std::move(part));
    at = end + delimiter.size();
  }
}

const MultipartPart* find_part(const std::vector<MultipartPart>& parts, std::string_view name) {
  for (const auto& p : parts)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace vgen
