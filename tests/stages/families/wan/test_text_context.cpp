#include "stages/families/wan/text_context.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "runtime/errors.hpp"

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;

namespace {

float max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<float>(); }

// Rows of random text, zero after each row's length: [R, rows, D].
at::Tensor texts(const std::vector<std::int64_t>& lengths, std::int64_t rows, std::int64_t dim) {
  auto e = at::randn({static_cast<std::int64_t>(lengths.size()), rows, dim});
  for (std::size_t r = 0; r < lengths.size(); ++r)
    e[static_cast<std::int64_t>(r)].narrow(0, lengths[r], rows - lengths[r]).zero_();
  return e;
}

// Cross-attention as Wan's attn2 does it: keys and values are affine in the context (with a
// bias, so zero rows give non-zero, identical keys), softmax over all context rows.
at::Tensor cross_attention(const at::Tensor& q, const at::Tensor& context, const at::Tensor& wk, const at::Tensor& bk,
                           const at::Tensor& wv, const at::Tensor& bv, const at::Tensor& key_bias) {
  auto k = at::matmul(context, wk) + bk;
  auto v = at::matmul(context, wv) + bv;
  auto mask = key_bias.defined() ? std::optional<at::Tensor>(key_bias.unsqueeze(1)) : std::nullopt;  // [R, 1, T]
  return at::scaled_dot_product_attention(q, k, v, mask);
}

}  // namespace

TEST_CASE("context rows: full max_length, or the longest text plus one zero row") {
  const std::vector<std::int64_t> some{3, 7, 1};
  CHECK(context_rows(some, 512, false) == 512);
  CHECK(context_rows(some, 512, true) == 8);
  const std::vector<std::int64_t> full{512, 2};
  CHECK(context_rows(full, 512, true) == 512);  // a text that fills max_length has no padding
  const std::vector<std::int64_t> almost{511};
  CHECK(context_rows(almost, 512, true) == 512);
  const std::vector<std::int64_t> empty_texts{0, 0};  // two rows even then: the zero row and a masked one
  CHECK(context_rows(empty_texts, 512, true) == 2);
  CHECK(context_rows(empty_texts, 1, true) == 1);
}

TEST_CASE("texts of different lengths stack with zero rows, lengths kept per row") {
  auto a = texts({4}, 4, 6), b = texts({2}, 2, 6);
  auto s = stack_texts({{a, {4}}, {b, {2}}});
  REQUIRE(s.embeds.sizes() == at::IntArrayRef({2, 4, 6}));
  CHECK(s.lengths == std::vector<std::int64_t>{4, 2});
  CHECK(max_diff(s.embeds[0], a[0]) == 0.0f);
  CHECK(max_diff(s.embeds[1].narrow(0, 0, 2), b[0]) == 0.0f);
  CHECK(s.embeds[1].narrow(0, 2, 2).abs().max().item<float>() == 0.0f);
  CHECK(pad_rows(a, 9).sizes() == at::IntArrayRef({1, 9, 6}));
  CHECK_THROWS_AS(pad_rows(a, 3), Error);  // never cuts a text's rows
}

TEST_CASE("the key bias: 0 on the text, ln(count) on one zero row, -inf after it") {
  auto bias = context_bias(std::vector<std::int64_t>{2, 4}, 5, 512);
  REQUIRE(bias.sizes() == at::IntArrayRef({2, 5}));
  CHECK(bias[0][0].item<float>() == 0.0f);
  CHECK(bias[0][1].item<float>() == 0.0f);
  CHECK(bias[0][2].item<float>() == doctest::Approx(std::log(510.0)));
  CHECK(std::isinf(bias[0][3].item<float>()));
  CHECK(bias[0][4].item<float>() < 0.0f);
  CHECK(bias[1][4].item<float>() == doctest::Approx(std::log(508.0)));
  CHECK(context_bias(std::vector<std::int64_t>{512}, 512, 512).abs().max().item<float>() == 0.0f);
  CHECK_THROWS_AS(context_bias(std::vector<std::int64_t>{5}, 5, 512), Error);  // no row left for the padding
}

TEST_CASE("make_context: the padded rows, and a key bias only in the compact form") {
  const std::vector<std::int64_t> lengths{3, 1};
  const TextRows text{texts(lengths, 3, 4), lengths};
  auto compact = make_context(text, 4, 512, true);
  CHECK(compact.context.sizes() == at::IntArrayRef({2, 4, 4}));
  CHECK(at::equal(compact.bias, context_bias(lengths, 4, 512)));  // -inf entries: no subtraction
  auto full = make_context(text, 512, 512, false);
  CHECK(full.context.sizes() == at::IntArrayRef({2, 512, 4}));
  CHECK_FALSE(full.bias.defined());
}

TEST_CASE("cross-attention over the compact context equals it over the zero-padded max_length") {
  at::manual_seed(7);
  const std::int64_t L = 512, D = 16, queries = 6;
  const std::vector<std::int64_t> lengths{1, 9, 30, L};
  auto full = texts(lengths, L, D);
  // Weights scaled as a trained layer's (unit-variance keys and values), so float32 rounding
  // stays near 1e-6 and 1e-5 is a real bound.
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto wk = at::randn({D, D}) * scale, wv = at::randn({D, D}) * scale, bk = at::randn({D}), bv = at::randn({D});
  auto q = at::randn({static_cast<std::int64_t>(lengths.size()), queries, D});
  auto want = cross_attention(q, full, wk, bk, wv, bv, at::Tensor());

  const auto rows = context_rows(lengths, L, true);
  CHECK(rows == L);  // one text fills max_length
  const std::vector<std::int64_t> short_lengths{1, 9, 30};
  const auto short_rows = context_rows(short_lengths, L, true);
  REQUIRE(short_rows == 31);
  auto three = full.narrow(0, 0, 3);
  auto compact = pad_rows(three.narrow(1, 0, short_rows).contiguous(), short_rows);
  auto got = cross_attention(q.narrow(0, 0, 3), compact, wk, bk, wv, bv, context_bias(short_lengths, short_rows, L));
  CHECK(max_diff(got, want.narrow(0, 0, 3)) <= 1e-5f);
  // Without the bias the zero row would count once instead of 511, 503 and 482 times.
  auto unbiased = cross_attention(q.narrow(0, 0, 3), compact, wk, bk, wv, bv, at::Tensor());
  CHECK(max_diff(unbiased, want.narrow(0, 0, 3)) > 1e-2f);
  // All four at the group's rows (512 here): the text that fills them gets no bias, each of the
  // others one ln(count) row and -inf on the rest.
  auto all = cross_attention(q, full, wk, bk, wv, bv, context_bias(lengths, rows, L));
  CHECK(max_diff(all, want) <= 1e-5f);
}
