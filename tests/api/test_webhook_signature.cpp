// Standard Webhooks signatures: the specification's reference vector (the one its libraries
// test against, also what PyPI's standardwebhooks computes), secrets with and without the
// whsec_ prefix, and malformed secrets refused.
#include "api/webhook_signature.hpp"
#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace vgen;

TEST_CASE("the reference vector of the Standard Webhooks libraries") {
  const auto key = webhook_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  CHECK(sign_webhook(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, R"({"test": 2432232314})") ==
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
  // The prefix is optional, as in the reference libraries.
  CHECK(webhook_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == key);
}

TEST_CASE("every signed part changes the signature") {
  const auto key = webhook_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  const auto sig = sign_webhook(key, "msg_1", 1000, "{}");
  CHECK(sign_webhook(key, "msg_2", 1000, "{}") != sig);
  CHECK(sign_webhook(key, "msg_1", 1001, "{}") != sig);
  CHECK(sign_webhook(key, "msg_1", 1000, "{ }") != sig);
  CHECK(sign_webhook(webhook_key("whsec_" + base64_encode("another key")), "msg_1", 1000, "{}") != sig);
}

TEST_CASE("base64 both ways, with and without padding") {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    const auto text = base64_encode(s);
    CHECK(text.size() % 4 == 0);
    if (!s.empty()) CHECK(base64_decode(text, "x") == s);
  }
  CHECK(base64_encode("abcd") == "YWJjZA==");
  CHECK(base64_decode("YWJjZA", "x") == "abcd");  // unpadded, as secrets sometimes are
}

TEST_CASE("malformed secrets are refused by name") {
  CHECK_THROWS_WITH_AS(webhook_key("whsec_"), doctest::Contains("webhook secret"), Error);
  CHECK_THROWS_WITH_AS(webhook_key("whsec_not base64!"), doctest::Contains("not base64"), Error);
  CHECK_THROWS_AS(webhook_key(""), Error);
}
