#include "api/http/http_response.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <system_error>

namespace vgen::http {

// ---- FileRange -------------------------------------------------------------------------

void FileRange::set_range(std::uint64_t offset, std::uint64_t length, beast::error_code& ec) {
  offset_ = offset;
  length_ = length;
  file_.seek(offset, ec);
}

std::uint64_t FileRange::pos(beast::error_code& ec) const {
  const auto p = file_.pos(ec);
  return p >= offset_ ? p - offset_ : 0;
}

std::size_t FileRange::write(void const*, std::size_t, beast::error_code& ec) {
  ec = std::make_error_code(std::errc::bad_file_descriptor);
  return 0;
}

// ---- StreamWriter ----------------------------------------------------------------------

asio::awaitable<bool> StreamWriter::write(std::string_view data) {
  if (!ok_ || data.empty()) co_return ok_;
  stream_.expires_after(write_timeout_);
  auto [ec, n] = co_await asio::async_write(stream_, bhttp::make_chunk(asio::buffer(data.data(), data.size())),
                                            asio::as_tuple(asio::use_awaitable));
  if (ec) ok_ = false;
  co_return ok_;
}

// ---- buffered responses ----------------------------------------------------------------

StringResponse json_response(unsigned status, std::string body) {
  StringResponse res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = std::move(body);
  return res;
}

StringResponse json_body(unsigned status, const boost::json::object& body) { return json_response(status, boost::json::serialize(body)); }

StringResponse error_response(unsigned status, std::string_view kind, std::string_view message) {
  boost::json::object error{{"kind", kind}, {"message", message}};
  auto res = json_response(status, boost::json::serialize(boost::json::object{{"error", std::move(error)}}));
  if (status == 429 || status == 503) res.set(bhttp::field::retry_after, "1");
  return res;
}

StringResponse error_response(ErrorKind kind, std::string_view message) {
  return error_response(static_cast<unsigned>(http_status_for(kind)), to_string(kind), message);
}

StringResponse error_response(const std::exception_ptr& error) {
  return error_response(classify(error), describe(error));
}

// ---- files and ranges ------------------------------------------------------------------

std::optional<ByteRange> parse_range(std::string_view header, std::uint64_t size) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  header = trim(header);
  if (!header.starts_with("bytes=")) return std::nullopt;
  auto spec = trim(header.substr(6));
  if (spec.find(',') != std::string_view::npos) return std::nullopt;
  const auto dash = spec.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto number = [](std::string_view s) -> std::optional<std::uint64_t> {
    std::uint64_t v = 0;
    const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || err != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
  };
  const auto first_text = trim(spec.substr(0, dash)), last_text = trim(spec.substr(dash + 1));
  if (first_text.empty()) {  // suffix: the last N bytes
    const auto n = number(last_text);
    if (!n) return std::nullopt;
    if (*n == 0 || size == 0) return ByteRange{0, 0, false};
    return ByteRange{size - std::min(*n, size), size - 1, true};
  }
  const auto first = number(first_text);
  if (!first) return std::nullopt;
  std::uint64_t last = size == 0 ? 0 : size - 1;
  if (!last_text.empty()) {
    const auto l = number(last_text);
    if (!l || *l < *first) return std::nullopt;
    last = std::min(*l, last);
  }
  if (*first >= size) return ByteRange{0, 0, false};
  return ByteRange{*first, last, true};
}

Response file_response(const Request& request, const std::filesystem::path& path, std::string_view content_type) {
  FileRange file;
  beast::error_code ec;
  file.open(path.c_str(), beast::file_mode::scan, ec);
  if (ec) throw_error(ErrorKind::not_found, "file '" + path.filename().string() + "': " + ec.message());
  const auto size = file.file_size(ec);
  if (ec) throw_error(ErrorKind::internal, "file '" + path.filename().string() + "': " + ec.message());

  std::optional<ByteRange> range;
  if (auto it = request.find(bhttp::field::range); it != request.end()) range = parse_range(it->value(), size);
  if (range && !range->satisfiable) {
    auto res = error_response(416, "invalid_argument", "range not satisfiable for " + std::to_string(size) + " bytes");
    res.set(bhttp::field::content_range, "bytes */" + std::to_string(size));
    res.set(bhttp::field::accept_ranges, "bytes");
    return res;
  }
  const std::uint64_t first = range ? range->first : 0;
  const std::uint64_t length = range ? range->last - range->first + 1 : size;
  file.set_range(first, length, ec);
  if (ec) throw_error(ErrorKind::internal, "file '" + path.filename().string() + "': " + ec.message());

  FileResponse res{range ? bhttp::status::partial_content : bhttp::status::ok, 11};
  res.set(bhttp::field::content_type, content_type);
  res.set(bhttp::field::accept_ranges, "bytes");
  if (range)
    res.set(bhttp::field::content_range, "bytes " + std::to_string(range->first) + "-" +
                                             std::to_string(range->last) + "/" + std::to_string(size));
  res.body().reset(std::move(file), ec);
  if (ec) throw_error(ErrorKind::internal, "file '" + path.filename().string() + "': " + ec.message());
  return res;
}

// ---- Server-Sent Events ----------------------------------------------------------------

std::string sse_event(std::string_view event, std::string_view data) {
  std::string out = "event: ";
  out.append(event).append("\n");
  for (;;) {
    const auto nl = data.find('\n');
    out.append("data: ").append(data.substr(0, nl)).append("\n");
    if (nl == std::string_view::npos) break;
    data.remove_prefix(nl + 1);
  }
  out.append("\n");
  return out;
}

// ---- query strings ---------------------------------------------------------------------

bool has_content_type(const Request& request, std::string_view type) {
  const auto it = request.find(bhttp::field::content_type);
  if (it == request.end()) return false;
  const auto value = it->value().substr(0, it->value().find(';'));
  return boost::beast::iequals(boost::beast::string_view(value.data(), value.size()),
                               boost::beast::string_view(type.data(), type.size()));
}

std::map<std::string, std::string, std::less<>> parse_query(std::string_view target) {
  std::map<std::string, std::string, std::less<>> out;
  const auto q = target.find('?');
  if (q == std::string_view::npos) return out;
  auto decode = [](std::string_view s) {
    std::string r;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '+') r += ' ';
      else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
        r += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else r += s[i];
    }
    return r;
  };
  auto rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = std::min(rest.find('&'), rest.size());
    const auto pair = rest.substr(0, amp);
    const auto eq = std::min(pair.find('='), pair.size());
    if (!pair.empty()) out[decode(pair.substr(0, eq))] = decode(pair.substr(std::min(eq + 1, pair.size())));
    rest.remove_prefix(std::min(amp + 1, rest.size()));
  }
  return out;
}

}  // namespace vgen::http
