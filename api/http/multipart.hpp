// multipart/form-data (RFC 7578) bodies, as browsers and `curl -F` send file uploads: the
// boundary from the Content-Type header, then the parts, each with its form field name, an
// optional file name and content type, and its bytes.
//
// Limits (MultipartLimits): how many parts, and how long one part's header block may be; the
// body's own size is bounded before this by the HTTP server (service.max_body_bytes).
// Errors: Error(invalid_argument) starting "multipart: " (HTTP 400): no or bad boundary, no
// closing delimiter (a truncated body), a part without a Content-Disposition form-data name,
// a field given twice, too many parts, a header block over the limit.
// Ownership: a MultipartPart's views point into the body passed in, which must outlive them.
// Thread-safety: pure functions. Blocking: none (CPU over the body once).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

struct MultipartPart {
  std::string name;          // the form field
  std::string filename;      // empty when the part is not a file
  std::string content_type;  // empty when not given (text/plain by the RFC)
  std::string_view body;     // into the parsed body
};

struct MultipartLimits {
  std::size_t max_parts = 8;
  std::size_t max_header_bytes = 4096;  // one part's header block
};

// The boundary parameter of a "multipart/form-data; boundary=..." Content-Type (quoted or not,
// 1-70 characters as RFC 2046 allows).
std::string multipart_boundary(std::string_view content_type);

// The parts of `body`, in order. A preamble before the first delimiter and an epilogue after
// the closing one are ignored.
std::vector<MultipartPart> parse_multipart(std::string_view body, std::string_view boundary,
                                           const MultipartLimits& limits = {});

// The part named `name`, or nullptr.
const MultipartPart* find_part(const std::vector<MultipartPart>& parts, std::string_view name);

}  // namespace vgen
