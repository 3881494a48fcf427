#include "api/batch/batch.hpp"

#include "runtime/atomic_file.hpp"

#include "runtime/errors.hpp"
#include "stages/media/encode.hpp"
#include "stages/media/probe.hpp"
#include "stages/text/tokenizer.hpp"

#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace vgen {

namespace fs = std::filesystem;
namespace json = boost::json;

bool output_is_complete(const Runtime& runtime, const JobSpec& spec, const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  try {
    // The admitted shape (set_output_shape: an extension's join, the post-stages); a length
    // admission could not know (output_frames 0) is left to the key below.
    const auto info = probe_video(path);
    if (info.width != spec.output_width || info.height != spec.output_height) return false;
    if (spec.output_frames > 0 && info.frames != spec.output_frames) return false;
    // Sound (a family with sound): probe decoded all of it; a short track is an interrupted or
    // damaged output. The clip's length is output_frames / output_fps.
    if (!info.audio.codec.empty() && spec.output_frames > 0 && spec.output_fps > 0 &&
        std::abs(info.audio.seconds() - spec.output_frames / spec.output_fps) > 1.0 / spec.output_fps + 0.1)
      return false;
    // mp4 and webm carry the job key; gif and png frames have no tag to check.
    if (spec.format == "mp4" || spec.format == "webm")
      return info.comment == "vgen:" + runtime.content_key(spec);
    // gif and png frames carry no tag: the job store must have written this very output for
    // this job's key (so a file from other settings is rendered again, as the README says).
    return runtime.has_rendered(spec, path);
  } catch (const Error&) {
    return false;
  }
}

namespace {

// One run_batch call: the rows so far and the jobs in flight. A stop request may come from any
// thread; it cancels what is in flight under mutex_, and the submitting thread cancels what it
// submits after it.
class BatchRun {
 public:
  BatchRun(JobService& jobs, const OutputCheck& complete, const BatchOptions& options)
      : jobs_(jobs), complete_(complete), options_(options) {}

  BatchSummary run(BatchReader& input) {
    const auto start = std::chrono::steady_clock::now();
    std::stop_callback on_stop(options_.stop, [this] { cancel_in_flight(); });
    std::exception_ptr error;  // e.g. the input refused as a whole (not text)
    try {
      while (!options_.stop.stop_requested()) {
        auto item = input.next();
        if (!item) break;
        start_item(std::move(*item));
        collect(/*wait=*/false);
      }
      input_done_ = !options_.stop.stop_requested();
    } catch (...) {
      error = std::current_exception();
      cancel_in_flight();
    }
    collect(/*wait=*/true);  // no job outlives the run (their event handlers point here)
    summary_.interrupted = options_.stop.stop_requested();
    summary_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!error || !summary_.items.empty()) write_summary();
    if (error) {
      if (!summary_.summary_error.empty()) spdlog::error("could not write the summary: {}", summary_.summary_error);
      std::rethrow_exception(error);
    }
    return std::move(summary_);
  }

 private:
  struct InFlight {
    std::size_t index;
    JobHandle handle;
  };

  void start_item(BatchItem item) {
    const auto i = summary_.items.size();
    auto& r = summary_.items.emplace_back();
    r.line = item.line;
    r.name = item.name;
    if (!item.error.empty()) return end_item(i, "invalid", ErrorKind::invalid_argument, item.error);
    try {
      // Admitted here as submit admits it (files read and hashed, an extend's kept latents
      // resolved) so that a rerun's skip check keys the line as the finished job's record does;
      // submit admits it again.
      json::value admitted(std::move(item.spec));
      auto spec = jobs_.admit(admitted);
      r.output = jobs_.config().output_dir / (item.name + extension_for(spec.format));
      if (!options_.force && complete_(admitted, spec, r.output)) return end_item(i, "skipped");
      SubmitOptions so;
      if (options_.on_event) so.on_progress = [this, name = item.name](const JobEvent& e) { options_.on_event(name, e); };
      auto handle = jobs_.submit(std::move(admitted), so);
      std::lock_guard lock(mutex_);
      in_flight_.push_back({i, handle});
      if (options_.stop.stop_requested()) handle.cancel(interrupted_reason);  // the callback ran before the push
    } catch (const Error& e) {
      const auto kind = e.kind();
      end_item(i, kind == ErrorKind::invalid_argument ? "invalid" : kind == ErrorKind::overloaded ? "cancelled" : "failed", kind,
               e.what());
    }
  }

  // Records finished jobs and forgets their handles; with `wait`, until none is left. A job
  // stays in in_flight_ until it has ended, so that a stop request can still cancel it.
  void collect(bool wait) {
    for (;;) {
      std::vector<InFlight> ended;
      JobHandle oldest;
      {
        std::lock_guard lock(mutex_);
        auto keep = std::stable_partition(in_flight_.begin(), in_flight_.end(),
                                          [](const InFlight& f) { return !f.handle.finished(); });
        std::move(keep, in_flight_.end(), std::back_inserter(ended));
        in_flight_.erase(keep, in_flight_.end());
        if (wait && !in_flight_.empty()) oldest = in_flight_.front().handle;
      }
      for (auto& f : ended) record(f);
      if (!oldest) return;
      oldest.wait();
    }
  }

  void record(const InFlight& f) {
    const auto res = f.handle.result();  // final: the job has ended
    auto& r = summary_.items[f.index];
    r.seconds = res.seconds;
    r.retries = res.retries;
    r.resumed_from_step = res.resumed_from_step;
    r.cache_hit = res.cache_hit;
    if (res.state == JobState::done) {
      r.output = res.output;
      end_item(f.index, "done");
    } else {
      end_item(f.index, std::string(to_string(res.state)), res.error_kind.value_or(ErrorKind::internal), res.error);
    }
  }

  void end_item(std::size_t i, std::string status, std::optional<ErrorKind> kind = std::nullopt, const std::string& error = {}) {
    auto& r = summary_.items[i];
    r.status = std::move(status);
    if (kind) {
      r.error_kind = kind;
      r.error = "line " + std::to_string(r.line) + ": " + error;
    }
    if (r.status != "done" && r.status != "skipped") r.output.clear();  // only the summary's fields stay
    if (options_.on_item_end) options_.on_item_end(r, ++finished_, input_done_ ? summary_.items.size() : 0);
  }

  void cancel_in_flight() {
    std::lock_guard lock(mutex_);
    for (auto& f : in_flight_) f.handle.cancel(interrupted_reason);
  }

  // A summary that cannot be written (a full disk) is reported in the summary returned, not
  // thrown: the rows are the only record of which jobs failed, and the caller still prints them.
  void write_summary() {
    const auto file = options_.summary_file.empty() ? jobs_.config().output_dir / batch_summary_name : options_.summary_file;
    std::ostringstream out;
    summary_.write_json(out);
    out << "\n";
    try {
      write_file_atomically(file, out.str());  // temp + fsync + rename: never half a summary
    } catch (const Error& e) {
      summary_.summary_error_kind = e.kind();
      summary_.summary_error = e.what();
    }
  }

  static constexpr const char* interrupted_reason = "batch interrupted";
  JobService& jobs_;
  const OutputCheck& complete_;
  const BatchOptions& options_;
  BatchSummary summary_;
  std::mutex mutex_;
  std::vector<InFlight> in_flight_;  // guarded by mutex_
  std::size_t finished_ = 0;
  bool input_done_ = false;
};

}  // namespace

BatchSummary run_batch(JobService& jobs, const OutputCheck& complete, BatchReader& input, const BatchOptions& options) {
  return BatchRun(jobs, complete, options).run(input);
}

BatchSummary run_batch(Runtime& runtime, BatchReader& input, const BatchOptions& options) {
  const OutputCheck complete = [&runtime](const json::value&, const JobSpec& spec, const fs::path& path) {
    return output_is_complete(runtime, spec, path);
  };
  return run_batch(runtime, complete, input, options);
}

std::size_t BatchSummary::count(const std::string& status) const {
  std::size_t n = 0;
  for (const auto& i : items) n += i.status == status;
  return n;
}

namespace {

json::object row_json(const BatchItemResult& i) {
  json::object o{{"line", i.line}, {"name", i.name}, {"status", i.status}, {"seconds", i.seconds},
                 {"retries", i.retries}, {"cache_hit", i.cache_hit}};
  if (!i.output.empty() && (i.status == "done" || i.status == "skipped")) o["output"] = i.output.string();
  if (!i.error.empty()) o["error"] = i.error;
  if (i.error_kind) o["error_kind"] = to_string(*i.error_kind);
  if (i.resumed_from_step > 0) o["resumed_from_step"] = i.resumed_from_step;
  return o;
}

}  // namespace

json::object BatchSummary::to_json() const {
  std::ostringstream text;
  write_json(text);
  return json::parse(text.str()).as_object();
}

// The same object as a json::object would serialize to, written a row at a time so that a
// long batch's summary does not exist twice in memory.
void BatchSummary::write_json(std::ostream& out) const {
  out << "{\"jobs\":[";
  for (std::size_t n = 0; n < items.size(); ++n) out << (n ? "," : "") << json::serialize(row_json(items[n]));
  json::object counts;
  for (const char* s : {"done", "skipped", "failed", "cancelled", "invalid"}) counts[s] = count(s);
  out << "],\"counts\":" << json::serialize(counts) << ",\"total\":" << items.size()
      << ",\"seconds\":" << json::serialize(json::value(seconds)) << ",\"interrupted\":" << (interrupted ? "true" : "false")
      << "}";
}

std::string BatchSummary::table() const {
  std::ostringstream t;
  write_table(t);
  return t.str();
}

void BatchSummary::write_table(std::ostream& t) const {
  char row[512];
  std::snprintf(row, sizeof row, "%5s  %-40s  %-9s  %7s  %7s  %5s  %s\n", "line", "name", "status", "seconds", "retries", "cache", "error");
  t << row;
  for (const auto& i : items) {
    const auto name = i.name.size() > 40 ? i.name.substr(0, 37) + "..." : i.name;
    // The error goes after the fixed columns, whole: a fixed buffer cut it mid-character.
    std::snprintf(row, sizeof row, "%5d  %-40s  %-9s  %7.2f  %7d  %5s  ", i.line, name.c_str(), i.status.c_str(), i.seconds,
                  i.retries, i.cache_hit ? "hit" : "-");
    t << row << i.error << "\n";
  }
  std::snprintf(row, sizeof row, "%zu jobs: %zu done, %zu skipped, %zu cached, %zu failed, %zu cancelled, %zu invalid in %.1f s%s\n",
                items.size(), count("done"), count("skipped"),
                static_cast<std::size_t>(std::count_if(items.begin(), items.end(), [](const auto& i) { return i.cache_hit; })),
                count("failed"), count("cancelled"), count("invalid"), seconds,
                interrupted ? " (interrupted: the lines after the last one listed were not started)" : "");
  t << row;
}

std::optional<ErrorKind> BatchSummary::error_kind() const {
  if (interrupted) return ErrorKind::cancelled;
  for (const auto& i : items)
    if (i.status == "failed" || i.status == "cancelled") return i.error_kind.value_or(ErrorKind::internal);
  if (summary_error_kind) return summary_error_kind;
  if (count("invalid") > 0) return ErrorKind::invalid_argument;
  return std::nullopt;
}

int BatchSummary::exit_code() const {
  const auto kind = error_kind();
  return kind ? exit_code_for(*kind) : 0;
}

}  // namespace vgen
