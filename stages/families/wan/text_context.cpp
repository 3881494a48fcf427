#include "stages/families/wan/text_context.hpp"

#include "runtime/errors.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace vgen {

std::int64_t context_rows(std::span<const std::int64_t> lengths, std::int64_t max_length, bool compact) {
  if (!compact || lengths.empty()) return max_length;
  // At least two rows: AOTInductor's CUDA export of the transformer specialises a one-row text
  // away (torch 2.11 guards text != 1 on an H200), and the extra row is masked like any padding.
  std::int64_t rows = std::min<std::int64_t>(2, max_length);
  for (auto n : lengths) rows = std::max(rows, std::min(max_length, n + 1));
  return rows;
}

at::Tensor pad_rows(const at::Tensor& embeds, std::int64_t count) {
  const auto have = embeds.size(1);
  if (have == count) return embeds;
  if (have > count)
    throw_error(ErrorKind::internal, "pad_rows: " + std::to_string(have) + " rows do not fit in " + std::to_string(count));
  return at::constant_pad_nd(embeds, {0, 0, 0, count - have});
}

TextRows stack_texts(const std::vector<TextRows>& texts) {
  if (texts.empty()) throw_error(ErrorKind::internal, "stack_texts: no texts");
  if (texts.size() == 1) return texts.front();
  std::int64_t rows = 0;
  for (const auto& t : texts) rows = std::max(rows, t.embeds.size(1));
  TextRows out;
  std::vector<at::Tensor> parts;
  for (const auto& t : texts) {
    parts.push_back(pad_rows(t.embeds, rows));
    out.lengths.insert(out.lengths.end(), t.lengths.begin(), t.lengths.end());
  }
  out.embeds = at::cat(parts, 0);
  return out;
}

at::Tensor context_bias(std::span<const std::int64_t> lengths, std::int64_t rows, std::int64_t max_length) {
  auto bias = at::zeros({static_cast<std::int64_t>(lengths.size()), rows}, at::kFloat);
  auto* b = bias.data_ptr<float>();
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    const auto n = lengths[r];
    if (n > rows || (n == rows && n < max_length))
      throw_error(ErrorKind::internal, "context_bias: a text of " + std::to_string(n) + " rows does not fit " + std::to_string(rows));
    if (n == max_length) continue;  // no padding to stand for
    auto* row = b + r * rows;
    row[n] = static_cast<float>(std::log(static_cast<double>(max_length - n)));
    std::fill(row + n + 1, row + rows, -std::numeric_limits<float>::infinity());
  }
  return bias;
}

TextContext make_context(const TextRows& text, std::int64_t rows, std::int64_t max_length, bool compact) {
  return {pad_rows(text.embeds, rows), compact ? context_bias(text.lengths, rows, max_length) : at::Tensor()};
}

}  // namespace vgen
