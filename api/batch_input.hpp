// Batch input: the text of a prompt file (`vgen batch`) as job items, without a Runtime, so
// that it builds and is tested (and fuzzed) without LibTorch. api/batch reads the file and
// runs the items.
//
// Input: plain text (one prompt per line; blank lines and lines starting with '#' are
// skipped) or JSONL (`jsonl`, or a first non-blank character '{': one job object per line,
// fields as in stages/job_spec.hpp). `defaults` apply under each line's own fields. A bad
// line (bad JSON, invalid UTF-8, a bad or duplicate name) gets its line number and an error
// and does not stop the others; the job fields themselves are validated when a job is run.
// Output names: the line's "name", else "NNNN-<prompt slug>" (NNNN = line number).
// Thread-safety: pure functions.
#pragma once

#include <boost/json/object.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace vgen {

struct BatchItem {
  int line = 0;              // 1-based line in the input file
  std::string name;          // output stem
  boost::json::object spec;  // the job spec, "name" included
  std::string error;         // non-empty: this line is invalid and is not run
};

// Error(invalid_argument) "<origin> holds no prompt" when no line holds a job.
std::vector<BatchItem> parse_batch_text(std::string_view text, const boost::json::object& defaults = {},
                                        bool jsonl = false, const std::string& origin = "prompt text");

}  // namespace vgen
