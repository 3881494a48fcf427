// The transformer's text context (cross-attention keys and values) for a denoise group.
//
// WanPipeline zero-pads every prompt embedding to max_length rows (512) and the cross-attention
// attends to all of them. A group's jobs keep each text at its own length (rows past a
// prompt's tokens are exactly zero, manifest text_encoder.output_masked) and are brought to one
// common row count here, in one of two forms:
//   full     [R, max_length, D]: the zero-padded context diffusers' forward takes;
//   compact  [R, T, D] plus a key bias [R, T] for the package's forward_compact, with T the
//            longest text + 1: each text's rows (bias 0), then one zero row with bias
//            ln(max_length - length), then -inf. n identical zero rows give n identical keys and
//            values, which weigh in the softmax exactly as one of them with ln(n) added to its
//            logit, so the compact form attends like the full one at a fraction of the rows.
// Pure functions over CPU tensors; thread-safe. Include only next to LibTorch (no spdlog/fmt).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <span>
#include <vector>

namespace vgen {

// A text's embedding rows and how many of them are its tokens: [1, length, D] when trimmed.
// Several texts stacked: [R, L, D] with a length per row (rows past it are zero).
struct TextRows {
  at::Tensor embeds;
  std::vector<std::int64_t> lengths;
};

// Rows of the group's context: the full max_length, or the longest text plus one zero row
// (max_length when a text fills it), never fewer than 2 (a compiled transformer's least).
std::int64_t context_rows(std::span<const std::int64_t> lengths, std::int64_t max_length, bool compact);

// `embeds` [R, L, D] zero-padded to `count` >= L rows: [R, count, D].
at::Tensor pad_rows(const at::Tensor& embeds, std::int64_t count);

// Several texts' rows stacked, each padded with zero rows to the longest: [sum R, L, D].
TextRows stack_texts(const std::vector<TextRows>& texts);

// The compact form's key bias, float32 [R, rows] (see the header comment).
at::Tensor context_bias(std::span<const std::int64_t> lengths, std::int64_t rows, std::int64_t max_length);

// The transformer's text inputs for `text` at the group's `rows`: the context [R, rows, D],
// and with `compact` its key bias (undefined otherwise: the full form).
struct TextContext {
  at::Tensor context, bias;
};
TextContext make_context(const TextRows& text, std::int64_t rows, std::int64_t max_length, bool compact);

}  // namespace vgen
