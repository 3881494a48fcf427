#include "runtime/content_key.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <boost/json/value.hpp>
#include <charconv>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <system_error>
#include <vector>

#include "runtime/errors.hpp"

namespace vgen {

namespace {

constexpr char hex_digits[] = "0123456789abcdef";

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// SHA-256 over the concatenation of `parts`, streamed so that the domain-separated key does
// not need to copy the JSON text.
ContentKey sha256(std::initializer_list<std::string_view> parts) {
  struct CtxFree {
    void operator()(EVP_MD_CTX* ctx) const noexcept { EVP_MD_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw_error(ErrorKind::internal, "content_key: cannot initialise SHA-256");
  }
  for (std::string_view part : parts) {
    if (EVP_DigestUpdate(ctx.get(), part.data(), part.size()) != 1) {
      throw_error(ErrorKind::internal, "content_key: SHA-256 update failed");
    }
  }
  ContentKey key;
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx.get(), key.bytes.data(), &length) != 1 ||
      length != key.bytes.size()) {
    throw_error(ErrorKind::internal, "content_key: SHA-256 final failed");
  }
  return key;
}

void write_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out.push_back(hex_digits[u >> 4]);
          out.push_back(hex_digits[u & 0xf]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

template <class Number>
void write_chars(std::string& out, Number n) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, n);
  if (ec != std::errc{}) throw_error(ErrorKind::internal, "canonical_json: number too long");
  out.append(buf, end);
}

void write_double(std::string& out, double d) {
  if (!std::isfinite(d)) {
    throw_error(ErrorKind::invalid_argument, "canonical_json: NaN and infinity have no JSON form");
  }
  // Integral doubles up to 2^53 are exact integers, so they are written as the integer they
  // equal; past 2^53 a double no longer names one integer and keeps its float form.
  constexpr double max_exact = 9007199254740992.0;  // 2^53
  if (std::trunc(d) == d && std::fabs(d) <= max_exact) {
    write_chars(out, static_cast<std::int64_t>(d));
  } else {
    write_chars(out, d);  // shortest round-trip representation
  }
}

void write_value(std::string& out, const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::null: out += "null"; break;
    case boost::json::kind::bool_: out += v.get_bool() ? "true" : "false"; break;
    case boost::json::kind::int64: write_chars(out, v.get_int64()); break;
    case boost::json::kind::uint64: write_chars(out, v.get_uint64()); break;
    case boost::json::kind::double_: write_double(out, v.get_double()); break;
    case boost::json::kind::string: write_string(out, v.get_string()); break;
    case boost::json::kind::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& element : v.get_array()) {
        if (!first) out.push_back(',');
        first = false;
        write_value(out, element);
      }
      out.push_back(']');
      break;
    }
    case boost::json::kind::object: {
      const auto& object = v.get_object();
      std::vector<const boost::json::key_value_pair*> members;
      members.reserve(object.size());
      for (const auto& member : object) members.push_back(&member);
      // std::string_view compares through char_traits<char>, i.e. as unsigned bytes.
      std::sort(members.begin(), members.end(), [](const auto* a, const auto* b) {
        return std::string_view(a->key()) < std::string_view(b->key());
      });
      out.push_back('{');
      bool first = true;
      for (const auto* member : members) {
        if (!first) out.push_back(',');
        first = false;
        write_string(out, member->key());
        out.push_back(':');
        write_value(out, member->value());
      }
      out.push_back('}');
      break;
    }
  }
}

}  // namespace

std::string ContentKey::hex() const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    out.push_back(hex_digits[b >> 4]);
    out.push_back(hex_digits[b & 0xf]);
  }
  return out;
}

ContentKey ContentKey::from_hex(std::string_view hex) {
  ContentKey key;
  if (hex.size() != key.bytes.size() * 2) {
    throw_error(ErrorKind::invalid_argument,
                "content key: expected 64 hex characters, got " + std::to_string(hex.size()));
  }
  for (std::size_t i = 0; i < key.bytes.size(); ++i) {
    const int high = hex_value(hex[2 * i]);
    const int low = hex_value(hex[2 * i + 1]);
    if (high < 0 || low < 0) {
      throw_error(ErrorKind::invalid_argument, "content key: not a hex string");
    }
    key.bytes[i] = static_cast<std::uint8_t>(high << 4 | low);
  }
  return key;
}

std::size_t ContentKeyHash::operator()(const ContentKey& key) const noexcept {
  std::size_t h = 0;
  std::memcpy(&h, key.bytes.data(), sizeof h);
  return h;
}

std::string canonical_json(const boost::json::value& v) {
  std::string out;
  write_value(out, v);
  return out;
}

ContentKey content_key(const boost::json::value& v) { return sha256({canonical_json(v)}); }

ContentKey content_key(std::string_view domain, const boost::json::value& v) {
  if (domain.find('\0') != std::string_view::npos) {
    throw_error(ErrorKind::invalid_argument, "content_key: domain must not contain '\\0'");
  }
  const std::string json = canonical_json(v);
  return sha256({domain, std::string_view("\0", 1), json});
}

ContentKey content_key_bytes(std::string_view bytes) { return sha256({bytes}); }

}  // namespace vgen
