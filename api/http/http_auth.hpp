// Bearer-token authentication for the HTTP service (RFC 6750 §2.1 credentials in the
// Authorization header, RFC 7235 §2.1 syntax): "Bearer" in any letter case, one or more
// spaces, then the token, which is compared exactly and in constant time.
// Stateless and thread-safe; nothing here blocks. The caller decides what to answer (401 with
// WWW-Authenticate: Bearer in api/http/http_api) and which routes are exempt.
#pragma once

#include "api/http/http_response.hpp"

#include <string_view>

namespace vgen::http {

// Whether `authorization`, the value of an Authorization header, presents `token`. Leading and
// trailing whitespace of the value is ignored. Another scheme ("Basic ..."), no token, or a
// different one (tokens are case-sensitive): false. An empty `token` matches nothing.
bool bearer_token_matches(std::string_view authorization, std::string_view token);

// Whether `request` may be served by a service that requires `token`: always when `token` is
// empty (no authentication configured), else when its Authorization header presents it.
bool bearer_authorized(const Request& request, std::string_view token);

// `presented == secret`, in a time that depends only on secret.size(): every byte of `secret`
// is compared whatever `presented` holds, so timing reveals neither its bytes nor its length.
bool same_secret(std::string_view presented, std::string_view secret);

}  // namespace vgen::http
