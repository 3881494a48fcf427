#include "stages/model/attention_uses.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace vgen;

TEST_CASE("attention_watch_wanted: the first call at each shape, at most kMaxWatchedShapes shapes per file, device and method") {
  clear_attention_uses();
  CHECK(attention_watch_wanted("/p/transformer.pt", "cpu", "forward", "[1, 16, 3, 4, 4]"));
  CHECK_FALSE(attention_watch_wanted("/p/transformer.pt", "cpu", "forward", "[1, 16, 3, 4, 4]"));  // watched already
  CHECK(attention_watch_wanted("/p/transformer.pt", "cpu", "forward_compact", "[1, 16, 3, 4, 4]"));  // another method
  CHECK(attention_watch_wanted("/p/transformer.pt", "cuda:0", "forward", "[1, 16, 3, 4, 4]"));       // another device
  // A call that failed gives its shape back.
  attention_watch_abandoned("/p/transformer.pt", "cpu", "forward", "[1, 16, 3, 4, 4]");
  CHECK(attention_watch_wanted("/p/transformer.pt", "cpu", "forward", "[1, 16, 3, 4, 4]"));
  std::size_t wanted = 1;
  for (int f = 4; f < 20; ++f)
    wanted += attention_watch_wanted("/p/transformer.pt", "cpu", "forward", "[1, 16, " + std::to_string(f) + ", 4, 4]");
  CHECK(wanted == kMaxWatchedShapes);
  clear_attention_uses();
  CHECK(attention_watch_wanted("/p/transformer.pt", "cpu", "forward", "[1, 16, 3, 4, 4]"));
  clear_attention_uses();
}

TEST_CASE("record_attention_use keeps the latest call per file, device and method; describe_attention says what ran") {
  clear_attention_uses();
  AttentionUse use{.file = "/p/transformer.pt", .device = "cuda:0", .method = "forward_compact", .input_shape = "[2, 16, 21, 60, 104]",
                   .kernels = {{"flash", 30}, {"efficient", 30}}, .sdpa_calls = 60};
  CHECK(describe_attention(use) == "efficient 30, flash 30 of 60 attention calls");
  record_attention_use(use);
  auto other = use;
  other.method = "forward";
  other.kernels = {{"flash", 60}};
  record_attention_use(other);
  auto later = use;
  later.kernels = {{"cudnn", 60}};
  record_attention_use(later);
  const auto all = attention_uses();
  REQUIRE(all.size() == 2);
  for (const auto& u : all) {
    if (u.method == "forward_compact") CHECK(u.kernels == std::map<std::string, int>{{"cudnn", 60}});
    else CHECK(u.kernels == std::map<std::string, int>{{"flash", 60}});
  }
  CHECK(describe_attention(AttentionUse{}) == "no scaled-dot-product attention");
  CHECK(describe_attention(AttentionUse{.sdpa_calls = 2}) == "no kernel seen of 2 attention calls");
  clear_attention_uses();
  CHECK(attention_uses().empty());
}
