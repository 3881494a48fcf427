#include "api/webhook_signature.hpp"

#include "runtime/errors.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace vgen {

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string base64_decode(std::string_view text, std::string_view what) {
  // The reference libraries accept unpadded secrets: pad to a multiple of 4 first.
  std::string padded(text);
  while (padded.size() % 4 != 0) padded += '=';
  if (padded.empty()) throw_error(ErrorKind::invalid_argument, std::string(what) + ": empty");
  std::string out(3 * padded.size() / 4, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(padded.data()),
                                static_cast<int>(padded.size()));
  if (n < 0) throw_error(ErrorKind::invalid_argument, std::string(what) + ": not base64");
  // EVP_DecodeBlock counts the padding as zero bytes: drop one per '='.
  std::size_t size = static_cast<std::size_t>(n);
  for (auto it = padded.rbegin(); it != padded.rend() && *it == '=' && size > 0; ++it) --size;
  out.resize(size);
  return out;
}

std::string webhook_key(std::string_view secret) {
  constexpr std::string_view prefix = "whsec_";
  if (secret.starts_with(prefix)) secret.remove_prefix(prefix.size());
  auto key = base64_decode(secret, "webhook secret (whsec_<base64>)");
  if (key.empty()) throw_error(ErrorKind::invalid_argument, "webhook secret (whsec_<base64>): the key is empty");
  return key;
}

std::string sign_webhook(std::string_view key, std::string_view id, std::int64_t timestamp, std::string_view body) {
  std::string content;
  content.reserve(id.size() + body.size() + 24);
  content.append(id).append(".").append(std::to_string(timestamp)).append(".").append(body);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_size = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(content.data()),
            content.size(), mac, &mac_size))
    throw_error(ErrorKind::internal, "webhook signature: HMAC-SHA256 failed");
  return "v1," + base64_encode(std::string_view(reinterpret_cast<const char*>(mac), mac_size));
}

}  // namespace vgen
