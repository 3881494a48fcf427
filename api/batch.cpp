#include "api/batch.hpp"

#include "runtime/errors.hpp"
#include "stages/encode.hpp"
#include "stages/probe.hpp"
#include "stages/tokenizer.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

namespace vgen {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

void write_atomically(const fs::path& file, const std::string& text) {
  const auto tmp = file.parent_path() / ("." + file.filename().string() + ".tmp-" + std::to_string(std::random_device{}()));
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out.flush()) throw_error(ErrorKind::internal, "cannot write " + tmp.string());
  }
  fs::rename(tmp, file);
}

// Temporaries an interrupted encode left for this output (".<name>.tmp-*").
void remove_stale_temporaries(const fs::path& output) {
  const auto prefix = "." + output.filename().string() + ".tmp-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(output.parent_path(), ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove_all(e.path(), ec);
}

}  // namespace

std::vector<BatchItem> read_batch_file(const fs::path& file, const json::object& defaults) {
  std::ifstream in(file, std::ios::binary);
  if (!in || fs::is_directory(file)) throw_error(ErrorKind::invalid_argument, "prompt file '" + file.string() + "' cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_batch_text(text.str(), defaults, file.extension() == ".jsonl", "prompt file '" + file.string() + "'");
}

bool output_is_complete(const Runtime& runtime, const JobSpec& spec, const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  try {
    const auto info = probe_video(path);
    if (info.frames != spec.frames || info.width != spec.width || info.height != spec.height) return false;
    // mp4 and webm carry the job key; gif and png frames have no tag to check.
    if (spec.format == "mp4" || spec.format == "webm")
      return info.comment == "vgen:" + job_content_key(runtime.package().id(), spec).hex();
    return true;
  } catch (const Error&) {
    return false;
  }
}

BatchSummary run_batch(Runtime& runtime, const std::vector<BatchItem>& items, const BatchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const auto& out_dir = runtime.config().output_dir;
  BatchSummary summary;
  summary.items.resize(items.size());
  std::vector<JobHandle> handles(items.size());
  std::size_t finished = 0;
  auto end_item = [&](std::size_t i) {
    if (options.on_item_end) options.on_item_end(summary.items[i], ++finished, items.size());
  };
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    auto& r = summary.items[i];
    r.line = item.line;
    r.name = item.name;
    if (!item.error.empty()) {
      r.status = "invalid";
      r.error = "line " + std::to_string(item.line) + ": " + item.error;
      end_item(i);
      continue;
    }
    try {
      const auto spec = runtime.validate(item.spec);
      r.output = out_dir / (item.name + extension_for(spec.format));
      remove_stale_temporaries(r.output);
      if (!options.force && output_is_complete(runtime, spec, r.output)) {
        r.status = "skipped";
        end_item(i);
        continue;
      }
      SubmitOptions so;
      if (options.on_event) so.on_progress = [&options, &item](const JobEvent& e) { options.on_event(item, e); };
      handles[i] = runtime.submit(item.spec, so);
    } catch (const Error& e) {
      r.status = e.kind() == ErrorKind::invalid_argument ? "invalid" : e.kind() == ErrorKind::overloaded ? "cancelled" : "failed";
      r.error = "line " + std::to_string(item.line) + ": " + e.what();
      end_item(i);
    }
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!handles[i]) continue;
    const auto res = handles[i].wait();
    auto& r = summary.items[i];
    r.status = std::string(to_string(res.state));
    r.seconds = res.seconds;
    r.retries = res.retries;
    r.cache_hit = res.cache_hit;
    if (res.state == JobState::done) r.output = res.output;
    else r.error = "line " + std::to_string(r.line) + ": " + res.error;
    end_item(i);
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto file = options.summary_file.empty() ? out_dir / "batch-summary.json" : options.summary_file;
  write_atomically(file, json::serialize(summary.to_json()) + "\n");
  return summary;
}

std::size_t BatchSummary::count(const std::string& status) const {
  std::size_t n = 0;
  for (const auto& i : items) n += i.status == status;
  return n;
}

json::object BatchSummary::to_json() const {
  json::array jobs;
  for (const auto& i : items) {
    json::object o{{"line", i.line}, {"name", i.name}, {"status", i.status}, {"seconds", i.seconds},
                   {"retries", i.retries}, {"cache_hit", i.cache_hit}};
    if (!i.output.empty() && (i.status == "done" || i.status == "skipped")) o["output"] = i.output.string();
    if (!i.error.empty()) o["error"] = i.error;
    jobs.push_back(std::move(o));
  }
  json::object counts;
  for (const char* s : {"done", "skipped", "failed", "cancelled", "invalid"}) counts[s] = count(s);
  return {{"jobs", std::move(jobs)}, {"counts", std::move(counts)}, {"total", items.size()}, {"seconds", seconds}};
}

std::string BatchSummary::table() const {
  std::ostringstream t;
  char row[512];
  std::snprintf(row, sizeof row, "%5s  %-40s  %-9s  %7s  %7s  %5s  %s\n", "line", "name", "status", "seconds", "retries", "cache", "error");
  t << row;
  for (const auto& i : items) {
    const auto name = i.name.size() > 40 ? i.name.substr(0, 37) + "..." : i.name;
    std::snprintf(row, sizeof row, "%5d  %-40s  %-9s  %7.2f  %7d  %5s  %s\n", i.line, name.c_str(), i.status.c_str(),
                  i.seconds, i.retries, i.cache_hit ? "hit" : "-", i.error.c_str());
    t << row;
  }
  std::snprintf(row, sizeof row, "%zu jobs: %zu done, %zu skipped, %zu cached, %zu failed, %zu cancelled, %zu invalid in %.1f s\n",
                items.size(), count("done"), count("skipped"),
                static_cast<std::size_t>(std::count_if(items.begin(), items.end(), [](const auto& i) { return i.cache_hit; })),
                count("failed"), count("cancelled"), count("invalid"), seconds);
  t << row;
  return t.str();
}

int BatchSummary::exit_code() const {
  if (count("failed") + count("cancelled") > 0) return 1;
  if (count("invalid") > 0) return 2;
  return 0;
}

}  // namespace vgen
