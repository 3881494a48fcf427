// Content keys: a SHA-256 digest of a job's content, used as the cache key for results and for
// text embeddings.
//
// Two JSON values that mean the same thing get the same key: the value is first written as
// canonical JSON (canonical_json below), and that text is hashed. Keys for different purposes
// are kept apart by a domain string that is hashed in front of the JSON, so a "text_embedding"
// key never equals a "result" key for the same request.
//
// Thread-safety: everything here is a pure function or a value type. Nothing blocks beyond the
// CPU cost of hashing. Failures throw vgen::Error: invalid_argument for bad input (malformed
// hex, a non-finite number, a domain containing '\0'), internal if OpenSSL fails.
#pragma once

#include <array>
#include <boost/json/fwd.hpp>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vgen {

// A SHA-256 digest. Ordered and hashable, so it can key std::map and std::unordered_map.
struct ContentKey {
  std::array<std::uint8_t, 32> bytes{};

  // 64 lowercase hex characters.
  std::string hex() const;

  // Parses exactly 64 hex characters (either case). Anything else throws
  // vgen::Error(ErrorKind::invalid_argument).
  static ContentKey from_hex(std::string_view hex);

  friend bool operator==(const ContentKey&, const ContentKey&) = default;
  friend auto operator<=>(const ContentKey&, const ContentKey&) = default;
};

// For unordered containers: the digest is already uniform, so this is its first word.
struct ContentKeyHash {
  std::size_t operator()(const ContentKey& key) const noexcept;
};

// The canonical text of a JSON value:
//  - no whitespace; object members sorted by key, comparing keys as unsigned bytes;
//    arrays keep their order;
//  - int64 and uint64 are written as integers; a double that is integral with magnitude at
//    most 2^53 is written as that integer (so 2.0 and 2 are the same, and -0.0 is "0"); any
//    other double is written in its shortest round-trip form (std::to_chars), e.g. 0.1 or
//    1e+300; NaN and infinities have no JSON form and throw invalid_argument;
//  - strings escape '"', '\\' and the control characters below 0x20 (\b \f \n \r \t, the
//    rest as \u00xx with lowercase hex); every other byte, UTF-8 included, is copied as is.
std::string canonical_json(const boost::json::value& v);

// SHA-256 of canonical_json(v).
ContentKey content_key(const boost::json::value& v);

// SHA-256 of domain + '\0' + canonical_json(v). A domain must not contain '\0' (else two
// (domain, value) pairs could hash the same text); that throws invalid_argument.
ContentKey content_key(std::string_view domain, const boost::json::value& v);

// SHA-256 of raw bytes (e.g. a file's contents).
ContentKey content_key_bytes(std::string_view bytes);

}  // namespace vgen
