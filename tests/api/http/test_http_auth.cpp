#include "api/http/http_auth.hpp"

#include <doctest/doctest.h>

#include <string>

namespace bhttp = boost::beast::http;
namespace http = vgen::http;

namespace {

http::Request with_authorization(const std::string& value) {
  http::Request r{bhttp::verb::get, "/metrics", 11};
  r.set(bhttp::field::authorization, value);
  return r;
}

}  // namespace

TEST_CASE("bearer_token_matches: the scheme is case-insensitive (RFC 7235), the token is not") {
  CHECK(http::bearer_token_matches("Bearer s3cret", "s3cret"));
  CHECK(http::bearer_token_matches("bearer s3cret", "s3cret"));  // was refused: 401
  CHECK(http::bearer_token_matches("BEARER s3cret", "s3cret"));
  CHECK(http::bearer_token_matches("bEaReR s3cret", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Bearer S3CRET", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Bearers3cret", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Bear s3cret", "s3cret"));
}

TEST_CASE("bearer_token_matches: one or more spaces between scheme and token (1*SP)") {
  CHECK(http::bearer_token_matches("Bearer  s3cret", "s3cret"));  // was refused: 401
  CHECK(http::bearer_token_matches("bearer     s3cret", "s3cret"));
  CHECK(http::bearer_token_matches("  Bearer s3cret \t", "s3cret"));  // surrounding OWS
  CHECK_FALSE(http::bearer_token_matches("Bearer\ts3cret", "s3cret"));  // SP only
  CHECK_FALSE(http::bearer_token_matches("Bearer s3 cret", "s3cret"));
}

TEST_CASE("bearer_token_matches: missing, wrong, truncated or extended token, other schemes") {
  CHECK_FALSE(http::bearer_token_matches("", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Bearer", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Bearer ", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Bearer    ", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("s3cret", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Bearer wrong!", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Bearer s3cre", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Bearer s3crets", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Basic s3cret", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Basic dXNlcjpzM2NyZXQ=", "s3cret"));
  CHECK_FALSE(http::bearer_token_matches("Bearer ", ""));  // an empty token matches nothing
  CHECK_FALSE(http::bearer_token_matches("Bearer", ""));
}

TEST_CASE("bearer_authorized: no token configured lets everything through; else the header decides") {
  http::Request none{bhttp::verb::get, "/metrics", 11};
  CHECK(http::bearer_authorized(none, ""));
  CHECK(http::bearer_authorized(with_authorization("Basic x"), ""));
  CHECK_FALSE(http::bearer_authorized(none, "tok"));
  CHECK(http::bearer_authorized(with_authorization("Bearer tok"), "tok"));
  CHECK(http::bearer_authorized(with_authorization("bearer tok"), "tok"));
  CHECK(http::bearer_authorized(with_authorization("BEARER  tok"), "tok"));
  CHECK_FALSE(http::bearer_authorized(with_authorization("Bearer other"), "tok"));
  CHECK_FALSE(http::bearer_authorized(with_authorization("Basic tok"), "tok"));
  CHECK_FALSE(http::bearer_authorized(with_authorization("Bearer"), "tok"));
}

TEST_CASE("same_secret: equality over any lengths, embedded NULs included") {
  CHECK(http::same_secret("abc", "abc"));
  CHECK(http::same_secret("", ""));
  CHECK_FALSE(http::same_secret("abd", "abc"));
  CHECK_FALSE(http::same_secret("ab", "abc"));    // a prefix of the secret
  CHECK_FALSE(http::same_secret("abcd", "abc"));  // the secret as a prefix
  CHECK_FALSE(http::same_secret("", "abc"));
  CHECK_FALSE(http::same_secret("abc", ""));
  // A shorter input is compared as if padded with NULs: that padding must not make it equal.
  CHECK_FALSE(http::same_secret("ab", std::string("ab\0", 3)));
  CHECK(http::same_secret(std::string("a\0c", 3), std::string("a\0c", 3)));
}
