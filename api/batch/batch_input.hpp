// Batch input: a prompt file (`vgen batch`) read as a stream of job items, without a Runtime,
// so that it builds and is tested (and fuzzed) without LibTorch. api/batch submits each item
// as it is read.
//
// Input: plain text (one prompt per line; blank lines and lines starting with '#' are
// skipped) or JSONL (`jsonl`, or a first non-blank character '{': one job object per line,
// fields as in stages/job_spec.hpp). A UTF-8 byte order mark at the start is dropped (before
// the JSONL detection). `defaults` apply under each line's own fields. A JSONL line's relative
// "image"/"last_image"/"video"/"mask_video"/"reference_images" paths are made absolute against
// the prompt file's folder (open_file;
// the working directory for other streams).
// A bad line (bad JSON, invalid UTF-8, a line longer than max_line_bytes, a bad, reserved or
// duplicate name, or a name whose output file another line already writes, e.g. "clip" as mp4
// and "clip.mp4" as png) gets its line number and an error and does not stop the others; the
// job fields themselves are validated when a job is run.
// Output names: the line's "name", else "NNNN-<prompt slug>" (NNNN = line number). Reserved:
// batch-summary.json and the output directory's lock file (runtime/output_lock.hpp).
// Memory: one line at a time (at most max_line_bytes of it) plus the output names seen so far
// (for duplicates); a NUL byte refuses the whole input as not text, so /dev/zero or a binary
// file ends at once instead of being read without bound.
// Thread-safety: a BatchReader is used by one thread at a time; parse_batch_text is pure.
// Blocking: next() blocks on reading the stream (a FIFO may block indefinitely).
#pragma once

#include <boost/json/object.hpp>

#include <cstddef>
#include <filesystem>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vgen {

struct BatchItem {
  int line = 0;              // 1-based line in the input file
  std::string name;          // output stem
  boost::json::object spec;  // the job spec, "name" included
  std::string error;         // non-empty: this line is invalid and is not run
};

inline constexpr std::size_t max_batch_line_bytes = std::size_t{1} << 20;
inline constexpr std::string_view batch_summary_name = "batch-summary.json";

class BatchReader {
 public:
  BatchReader(std::unique_ptr<std::istream> in, boost::json::object defaults = {}, bool jsonl = false,
              std::string origin = "prompt text", std::size_t max_line_bytes = max_batch_line_bytes);
  // A prompt file; JSONL when its extension is .jsonl. Error(invalid_argument) "<origin>
  // cannot be read" when it cannot be opened or is a directory.
  static BatchReader open_file(const std::filesystem::path& file, boost::json::object defaults = {});

  // The next item in input order, or nullopt at the end of the input. Error(invalid_argument):
  // the input is not text (a NUL byte; the message names the line), or it ended without any
  // job ("<origin> holds no prompt").
  std::optional<BatchItem> next();
  // The item next() returns next, read now but not consumed (nullptr at the end); errors as
  // next(). A caller peeks to refuse an empty or binary file before any expensive start-up.
  const BatchItem* peek();
  const std::string& origin() const noexcept { return origin_; }

 private:
  std::optional<BatchItem> read_item();
  bool read_line();  // false at the end of the input
  void check_output_name(BatchItem& item);

  std::unique_ptr<std::istream> in_;
  boost::json::object defaults_;
  bool jsonl_;
  std::optional<bool> detected_jsonl_;  // decided by the first line holding a job
  std::string origin_;
  std::size_t max_line_bytes_;
  std::string line_;
  bool too_long_ = false;
  int line_number_ = 0;
  std::size_t items_ = 0;
  std::filesystem::path base_dir_;  // relative image paths resolve here: the file's folder, else the working directory
  std::optional<std::optional<BatchItem>> peeked_;  // set by peek(): the next item, or the end
  struct OutputOwner {
    int line = 0;               // the line writing it
    std::size_t name_size = 0;  // its name's length (the output is name + extension)
  };
  std::unordered_map<std::string, OutputOwner> outputs_;  // output file name -> its line
};

// Every item of `text` at once (tests, fuzzing). Errors as BatchReader::next.
std::vector<BatchItem> parse_batch_text(std::string_view text, const boost::json::object& defaults = {},
                                        bool jsonl = false, const std::string& origin = "prompt text");

}  // namespace vgen
