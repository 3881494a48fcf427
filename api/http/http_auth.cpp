#include "api/http/http_auth.hpp"

#include <boost/beast/core/string.hpp>

namespace vgen::http {

namespace {

std::string_view trim_whitespace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool same_secret(std::string_view presented, std::string_view secret) {
  // The loop runs over the secret, never stops early, and folds a length mismatch into the
  // result; `volatile` keeps the compiler from turning it back into an early-exit compare.
  volatile unsigned diff = presented.size() == secret.size() ? 0u : 1u;
  for (std::size_t i = 0; i < secret.size(); ++i) {
    const auto p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0u;
    diff = diff | (p ^ static_cast<unsigned char>(secret[i]));
  }
  return diff == 0;
}

bool bearer_token_matches(std::string_view authorization, std::string_view token) {
  if (token.empty()) return false;
  const auto value = trim_whitespace(authorization);
  // credentials = auth-scheme [ 1*SP ( token68 / #auth-param ) ]; the scheme is
  // case-insensitive (RFC 7235 §2.1), the token is not.
  const auto space = value.find(' ');
  if (space == std::string_view::npos) return false;  // a scheme without a token
  const auto scheme = value.substr(0, space);
  if (!boost::beast::iequals(boost::beast::string_view(scheme.data(), scheme.size()), "Bearer")) return false;
  auto credentials = value.substr(space);
  while (!credentials.empty() && credentials.front() == ' ') credentials.remove_prefix(1);
  return same_secret(credentials, token);
}

bool bearer_authorized(const Request& request, std::string_view token) {
  if (token.empty()) return true;
  const auto it = request.find(bhttp::field::authorization);
  return it != request.end() && bearer_token_matches(it->value(), token);
}

}  // namespace vgen::http
