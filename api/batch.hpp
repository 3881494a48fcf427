// Batch runs (`vgen batch`): a prompt file becomes jobs, all submitted to one vgen::Runtime
// (bounded queues: submission waits while they are full), with one summary at the end.
//
// Input: a text file (one prompt per line; blank lines and lines starting with '#' are
// skipped) or JSONL (extension .jsonl, or a first non-blank character '{': one job object per
// line, fields as in stages/job_spec.hpp), parsed by parse_batch_text (api/batch_input.hpp).
// Defaults given by the caller (CLI flags) apply under each line's own fields. A bad line (bad
// JSON, invalid UTF-8, an invalid field) is reported with its line number and does not stop
// the other jobs.
// Output names: the line's "name", else "NNNN-<prompt slug>" (NNNN = line number).
// Reruns: an existing output is skipped only when probing it shows a complete video of the
// expected size and frame count whose comment tag carries this job's key (so a file from
// another prompt or settings is rendered again); anything else, and leftover temporaries from
// an interrupted run, is redone. `force` renders everything again.
// Thread-safety: run_batch blocks the calling thread (not a Runtime io thread); on_event is
// called from Runtime threads.
#pragma once

#include "api/batch_input.hpp"
#include "api/engine.hpp"

#include <boost/json/object.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace vgen {

// Error(invalid_argument) if the file cannot be read or holds no job at all.
std::vector<BatchItem> read_batch_file(const std::filesystem::path& file, const boost::json::object& defaults = {});

struct BatchItemResult {
  int line = 0;
  std::string name;
  std::string status;  // done | skipped | failed | cancelled | invalid
  std::filesystem::path output;
  double seconds = 0;
  int retries = 0;
  bool cache_hit = false;
  std::string error;
};

struct BatchSummary {
  std::vector<BatchItemResult> items;  // in input order
  double seconds = 0;
  std::size_t count(const std::string& status) const;
  boost::json::object to_json() const;
  std::string table() const;  // a fixed-width table for the terminal
  int exit_code() const;      // 1 if a job failed, else 2 if a line was invalid, else 0
};

struct BatchOptions {
  bool force = false;
  // Every job event (with the item it belongs to), and each item's end.
  std::function<void(const BatchItem&, const JobEvent&)> on_event;
  std::function<void(const BatchItemResult&, std::size_t finished, std::size_t total)> on_item_end;
  std::filesystem::path summary_file;  // empty: <output_dir>/batch-summary.json
};

// Runs every valid item; writes the summary file atomically; returns the summary.
BatchSummary run_batch(Runtime& runtime, const std::vector<BatchItem>& items, const BatchOptions& options = {});

// Whether `path` is a complete output of `spec` on the runtime's model (see above).
bool output_is_complete(const Runtime& runtime, const JobSpec& spec, const std::filesystem::path& path);

}  // namespace vgen
