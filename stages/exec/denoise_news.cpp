#include "stages/exec/denoise_news.hpp"

namespace vgen {

namespace json = boost::json;

namespace {

int int_of(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_int64() ? static_cast<int>(v->get_int64()) : 0;
}

void add(json::object& o, std::string_view key, int n) { o[key] = int_of(o, key) + n; }

// The event's detail: `event` (if any) and the job's skipped count (if any), in that order.
json::object news(const Job& job, std::string_view event) {
  json::object d;
  if (!event.empty()) d["event"] = event;
  if (const int n = skipped_steps(job.snapshot()); n > 0) d["skipped"] = n;
  return d;
}

std::string at_step(std::string_view what, int step, int total) {
  return std::string(what) + " at step " + std::to_string(step) + " of " + std::to_string(total);
}

}  // namespace

void report_preview(Job& job, std::shared_ptr<const JobPreview> preview) {
  if (!preview) return;
  const int step = preview->step, total = preview->total;
  job.publish(std::string(kPreviewAttachment), std::move(preview), step, total);
}

std::shared_ptr<const JobPreview> latest_preview(const Job& job) {
  return std::dynamic_pointer_cast<const JobPreview>(job.attachment(kPreviewAttachment));
}

std::shared_ptr<const JobPreview> preview_of(const JobEvent& e) {
  if (e.attachment_name != kPreviewAttachment) return nullptr;
  return std::dynamic_pointer_cast<const JobPreview>(e.attachment);
}

void report_step(Job& job, int step, int total) { job.report_progress(step, total, news(job, {})); }

void record_skipped(Job& job, int n) {
  job.edit_detail([n](json::object& d) { add(d, "skipped_steps", n); });
}

void report_scheduling(Job& job, std::string_view event, int step, int total) {
  if (event == "preempted") job.edit_detail([](json::object& d) { add(d, "preemptions", 1); });
  job.report_progress(step, total, news(job, event), at_step(event, step, total));
}

void report_resumed(Job& job, int step, int total) {
  job.report_progress(step, total, json::object{{"event", "resumed"}}, at_step("resumed", step, total) + " from a checkpoint");
}

std::string scheduling_event(const JobEvent& e) {
  const auto* v = e.detail.if_contains("event");
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

int skipped(const JobEvent& e) { return int_of(e.detail, "skipped"); }
int preemptions(const JobSnapshot& s) { return int_of(s.detail, "preemptions"); }
int skipped_steps(const JobSnapshot& s) { return int_of(s.detail, "skipped_steps"); }

}  // namespace vgen
