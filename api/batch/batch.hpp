// Batch runs (`vgen batch`): a prompt file becomes jobs, all submitted to one JobService (a
// vgen::Runtime in this process, or a FleetClient for `vgen batch --queue`: one path for both;
// submission waits while the queues are full), with one summary at the end.
//
// Input: a BatchReader (api/batch/batch_input.hpp: text or JSONL, one job per line). Items are
// submitted as they are read, so memory stays flat in the file's length: the reader holds one
// line, the Runtime's queues bound the jobs in flight, and a finished job keeps only its
// summary row (line, name, status, output, timings, error), not its spec. A bad line (bad
// JSON, invalid UTF-8, an invalid field) is reported with its line number and does not stop
// the other jobs; an input refused as a whole (a NUL byte: not text) cancels the jobs in
// flight and is rethrown after the summary is written.
// Output names: the line's "name", else "NNNN-<prompt slug>" (NNNN = line number).
// Reruns: an existing output is skipped only when probing it shows a complete video of the
// expected size and frame count (an extension's joined clip, the post-stages' frames and size:
// JobSpec::output_*) whose comment tag carries this job's key (so a file from
// another prompt or settings is rendered again), and whose sound, if it has any (an audio
// stream, or the WAV beside a gif / in a png folder), decodes to the end and lasts the clip
// (output_frames / output_fps, within one video frame plus 0.1 s of codec framing); anything else, and leftover temporaries from
// an interrupted run, is redone. `force` renders everything again. The service answers that
// question through an OutputCheck: output_is_complete for a Runtime; for the fleet,
// FleetClient::has_output (the key comes from the done record its worker wrote).
// Cancellation: a stop request on BatchOptions::stop (any thread) cancels every submitted
// job, stops reading, waits for the cancelled jobs to end and still writes the summary
// (interrupted = true; lines after the last item were not read).
// Exit code: exit_code_for(error_kind()): cancelled (130) when interrupted, else the kind of
// the first failed or cancelled job (1 for most kinds), else the kind of the failure to write
// the summary file (transient: 1), else invalid_argument (2) when a line was invalid, else 0.
// Summary file: written atomically (never half a file, no temporary left). If that fails (a
// full disk), run_batch still returns the summary with summary_error set rather than throwing:
// the jobs' results are not lost, the caller prints them and reports the file's failure.
// Each row with an error carries its kind ("error_kind": transient, invalid_argument, ...).
// Thread-safety: run_batch blocks the calling thread (not an io thread of the service);
// on_event is called from the service's threads (and from the thread requesting a stop).
#pragma once

#include "api/batch/batch_input.hpp"
#include "api/engine.hpp"
#include "api/job_service.hpp"
#include "runtime/errors.hpp"

#include <boost/json/object.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <stop_token>
#include <string>
#include <vector>

namespace vgen {

struct BatchItemResult {
  int line = 0;
  std::string name;
  std::string status;  // done | skipped | failed | cancelled | invalid
  std::filesystem::path output;
  double seconds = 0;
  int retries = 0;
  int resumed_from_step = 0;  // > 0: went on from a step checkpoint of a crashed run
  bool cache_hit = false;
  std::optional<ErrorKind> error_kind;  // set with error
  std::string error;
};

struct BatchSummary {
  std::vector<BatchItemResult> items;  // in input order
  double seconds = 0;
  bool interrupted = false;  // a stop request ended the run early
  // Set when the summary file could not be written (e.g. the disk is full): the reason, and
  // its kind (transient for ENOSPC). The summary itself is still returned (and printed).
  std::optional<ErrorKind> summary_error_kind;
  std::string summary_error;
  std::size_t count(const std::string& status) const;
  boost::json::object to_json() const;
  void write_json(std::ostream& out) const;   // to_json() serialized, a row at a time
  std::string table() const;                  // a fixed-width table for the terminal
  void write_table(std::ostream& out) const;
  std::optional<ErrorKind> error_kind() const;  // see the header comment; nullopt: all good
  int exit_code() const;                        // exit_code_for(error_kind()), 0 without one
};

struct BatchOptions {
  bool force = false;
  // Every job event (with the name of the item it belongs to), and each item's end; `total`
  // is 0 while the input is still being read.
  std::function<void(const std::string& name, const JobEvent&)> on_event;
  std::function<void(const BatchItemResult&, std::size_t finished, std::size_t total)> on_item_end;
  std::filesystem::path summary_file;  // empty: <output_dir>/batch-summary.json
  std::stop_token stop;                // a stop request interrupts the run (see above)
};

// The rerun rule's question: whether `path` already holds the complete output of a job with
// this spec (`spec`: the line's JSON with its images admitted; `parsed`: the same, validated).
using OutputCheck =
    std::function<bool(const boost::json::value& spec, const JobSpec& parsed, const std::filesystem::path& path)>;

// Runs every valid item on `jobs` as it is read; skips the items `complete` says are done
// (unless options.force); writes the summary file atomically; returns the summary.
BatchSummary run_batch(JobService& jobs, const OutputCheck& complete, BatchReader& input, const BatchOptions& options = {});
// The same on a Runtime, with output_is_complete as the rerun rule.
BatchSummary run_batch(Runtime& runtime, BatchReader& input, const BatchOptions& options = {});

// Whether `path` is a complete output of `spec` on the runtime's model (see above). `spec` as
// JobService::admit returns it: its output_* fields are the shape the file must have.
bool output_is_complete(const Runtime& runtime, const JobSpec& spec, const std::filesystem::path& path);

}  // namespace vgen
