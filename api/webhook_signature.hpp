// Webhook signatures as the Standard Webhooks specification defines them (the scheme OpenAI's
// webhooks use): a secret "whsec_<base64 of the key>", and for a message id, a send time and
// the exact body bytes the header
//   webhook-signature: v1,<base64 of HMAC-SHA256(key, "<id>.<timestamp>.<body>")>
// A receiver recomputes it (e.g. PyPI's standardwebhooks) and rejects a mismatch or a
// timestamp far from its clock.
// Thread-safety: pure functions. Errors: Error(invalid_argument) for a malformed secret.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vgen {

// The HMAC key of a "whsec_<base64>" secret (the prefix is optional, as in the reference
// libraries). Error(invalid_argument) when the rest is not base64 or is empty.
std::string webhook_key(std::string_view secret);

// "v1,<base64 HMAC-SHA256>" of "<id>.<timestamp>.<body>" under `key` (webhook_key's result).
std::string sign_webhook(std::string_view key, std::string_view id, std::int64_t timestamp, std::string_view body);

std::string base64_encode(std::string_view bytes);
// Error(invalid_argument) naming `what` when `text` is not padded standard base64.
std::string base64_decode(std::string_view text, std::string_view what);

}  // namespace vgen
