#include "runtime/trace.hpp"

#include "runtime/atomic_file.hpp"

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>

#include <set>

namespace vgen {

namespace json = boost::json;

Tracer::Tracer(std::size_t max_events) : max_events_(max_events) {}

double Tracer::micros(clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

std::pair<std::uint32_t, std::uint32_t> Tracer::ids_for(std::string_view process, std::string_view track) {
  auto p = processes_.find(process);
  if (p == processes_.end()) p = processes_.emplace(std::string(process), static_cast<std::uint32_t>(processes_.size() + 1)).first;
  const std::uint32_t pid = p->second;
  auto key = std::make_pair(pid, std::string(track));
  auto t = tracks_.find(key);
  if (t == tracks_.end()) t = tracks_.emplace(std::move(key), static_cast<std::uint32_t>(tracks_.size() + 1)).first;
  return {pid, t->second};
}

void Tracer::add(Event e) {
  // Caller holds mutex_.
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(e));
}

void Tracer::span(std::string_view process, std::string_view track, std::string_view name, clock::time_point start,
                  clock::time_point end, json::object args) {
  if (!enabled()) return;
  std::lock_guard lock(mutex_);
  auto [pid, tid] = ids_for(process, track);
  add(Event{'X', pid, tid, std::string(name), start, std::max(start, end), std::move(args)});
}

void Tracer::instant(std::string_view process, std::string_view track, std::string_view name, clock::time_point at,
                     json::object args) {
  if (!enabled()) return;
  std::lock_guard lock(mutex_);
  auto [pid, tid] = ids_for(process, track);
  add(Event{'i', pid, tid, std::string(name), at, at, std::move(args)});
}

std::string Tracer::thread_track(std::string_view prefix) {
  std::lock_guard lock(mutex_);
  auto key = std::make_pair(std::string(prefix), std::this_thread::get_id());
  auto it = thread_tracks_.find(key);
  if (it != thread_tracks_.end()) return it->second;
  const auto n = thread_counts_[std::string(prefix)]++;
  auto name = std::string(prefix) + " thread " + std::to_string(n);
  thread_tracks_.emplace(std::move(key), name);
  return name;
}

Tracer::clock::time_point Tracer::begin() {
  const auto now = clock::now();
  captures_.fetch_add(1);
  return now;
}

json::value Tracer::end(clock::time_point start) {
  json::array out;
  std::uint64_t dropped = 0;
  {
    std::lock_guard lock(mutex_);
    std::set<std::pair<std::uint32_t, std::uint32_t>> used;
    for (const auto& e : events_) {
      if (e.end < start) continue;
      json::object o{{"name", e.name}, {"ph", std::string(1, e.phase)}, {"pid", e.pid}, {"tid", e.tid}, {"ts", micros(e.start)}};
      if (e.phase == 'X') o["dur"] = micros(e.end) - micros(e.start);
      else o["s"] = "t";  // an instant on its thread's track
      if (!e.args.empty()) o["args"] = e.args;
      out.push_back(std::move(o));
      used.emplace(e.pid, e.tid);
    }
    // Names for the processes and tracks that appear (Perfetto shows them as track titles);
    // sort_index keeps tracks in the order they first appeared.
    for (const auto& [name, pid] : processes_) {
      out.push_back(json::object{{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}});
      out.push_back(json::object{{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
    }
    for (const auto& [key, tid] : tracks_) {
      if (!used.count({key.first, tid})) continue;
      out.push_back(json::object{{"name", "thread_name"}, {"ph", "M"}, {"pid", key.first}, {"tid", tid}, {"args", {{"name", key.second}}}});
      out.push_back(json::object{{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", key.first}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
    }
    dropped = dropped_;
    if (captures_.fetch_sub(1) == 1) {
      events_.clear();
      events_.shrink_to_fit();
      dropped_ = 0;
    }
  }
  return json::object{{"traceEvents", std::move(out)}, {"displayTimeUnit", "ms"}, {"droppedEvents", dropped}};
}

void Tracer::end_to_file(clock::time_point start, const std::filesystem::path& file) {
  write_file_atomically(file, json::serialize(end(start)));
}

TraceSpan::TraceSpan(Tracer* tracer, std::string_view prefix, std::string_view name, json::object args) {
  if (!tracer || !tracer->enabled()) return;
  tracer_ = tracer;
  track_ = tracer->thread_track(prefix);
  name_ = name;
  args_ = std::move(args);
  start_ = Tracer::clock::now();
}

TraceSpan::~TraceSpan() {
  if (tracer_) tracer_->span("devices", track_, name_, start_, Tracer::clock::now(), std::move(args_));
}

std::vector<std::string> check_trace_json(const json::value& trace) {
  std::vector<std::string> problems;
  const auto* root = trace.if_object();
  const auto* events = root && root->contains("traceEvents") ? root->at("traceEvents").if_array() : nullptr;
  if (!events) return {"the trace is not an object with a \"traceEvents\" array"};
  std::set<std::pair<std::int64_t, std::int64_t>> named, used;
  std::size_t i = 0;
  for (const auto& v : *events) {
    const auto where = "event " + std::to_string(i++);
    const auto* e = v.if_object();
    if (!e) {
      problems.push_back(where + ": not an object");
      continue;
    }
    const auto* ph = e->contains("ph") ? e->at("ph").if_string() : nullptr;
    const bool has_name = e->contains("name") && e->at("name").is_string();
    const bool has_ids = e->contains("pid") && e->at("pid").is_number() && e->contains("tid") && e->at("tid").is_number();
    if (!ph || ph->size() != 1 || !has_name || !has_ids) {
      problems.push_back(where + ": needs string \"name\", one-letter \"ph\", numeric \"pid\" and \"tid\"");
      continue;
    }
    const std::pair<std::int64_t, std::int64_t> ids{e->at("pid").to_number<std::int64_t>(), e->at("tid").to_number<std::int64_t>()};
    const char phase = (*ph)[0];
    if (phase == 'M') {
      if (e->at("name").as_string() == "thread_name") named.insert(ids);
      continue;
    }
    if (phase != 'X' && phase != 'i' && phase != 'B' && phase != 'E') {
      problems.push_back(where + ": unexpected phase '" + std::string(*ph) + "'");
      continue;
    }
    if (!e->contains("ts") || !e->at("ts").is_number() || e->at("ts").to_number<double>() < 0)
      problems.push_back(where + ": needs a numeric \"ts\" >= 0");
    if (phase == 'X' && (!e->contains("dur") || !e->at("dur").is_number() || e->at("dur").to_number<double>() < 0))
      problems.push_back(where + ": a complete event needs a numeric \"dur\" >= 0");
    if (e->contains("args") && !e->at("args").is_object()) problems.push_back(where + ": \"args\" must be an object");
    used.insert(ids);
  }
  for (const auto& ids : used)
    if (!named.count(ids))
      problems.push_back("track pid " + std::to_string(ids.first) + " tid " + std::to_string(ids.second) + " has no thread_name");
  return problems;
}

}  // namespace vgen
