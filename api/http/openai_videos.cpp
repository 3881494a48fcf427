#include "api/http/openai_videos.hpp"

#include "api/config.hpp"
#include "api/http/http_auth.hpp"
#include "api/http/live_video.hpp"
#include "api/http/multipart.hpp"
#include "api/http/uploads.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/job_id.hpp"
#include "stages/exec/kept_latents.hpp"
#include "stages/media/stills.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>

namespace vgen {

namespace asio = boost::asio;
namespace json = boost::json;
namespace bhttp = boost::beast::http;
namespace fs = std::filesystem;


namespace {

struct RouteEntry {
  bhttp::verb method;
  std::string_view path;
};
constexpr RouteEntry kRoutes[] = {
    {bhttp::verb::post, "/v1/videos"},          {bhttp::verb::get, "/v1/videos"},
    {bhttp::verb::get, "/v1/videos/{id}"},      {bhttp::verb::delete_, "/v1/videos/{id}"},
    {bhttp::verb::get, "/v1/videos/{id}/content"}, {bhttp::verb::get, "/v1/models"},
    // A video in (api/http/openai_video_edits). GET /v1/videos/edits reads "edits" as an id: 404.
    {bhttp::verb::post, "/v1/videos/edits"},    {bhttp::verb::post, "/v1/videos/{id}/remix"},
    {bhttp::verb::post, "/v1/videos/extensions"},
};

// `path` against a template with "{id}" for one non-empty segment.
bool match(std::string_view pattern, std::string_view path, std::string& id) {
  const auto brace = pattern.find("{id}");
  if (brace == std::string_view::npos) return pattern == path;
  if (path.substr(0, brace) != pattern.substr(0, brace)) return false;
  const auto rest = pattern.substr(brace + 4);
  const auto tail = path.substr(brace);
  const auto slash = std::min(tail.find('/'), tail.size());
  if (slash == 0 || tail.substr(slash) != rest) return false;
  id = std::string(tail.substr(0, slash));
  return true;
}

std::int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

std::int64_t created_at(const std::string& id, double age_seconds) {
  if (const auto t = job_id_time(id)) return unix_seconds(*t);
  return unix_seconds(std::chrono::system_clock::now()) - static_cast<std::int64_t>(age_seconds);
}

fs::path still_path(const fs::path& video, std::string_view variant) {
  return video.parent_path() / (video.stem().string() + (variant == "thumbnail" ? ".thumbnail.png" : ".spritesheet.jpg"));
}

using http::json_body;

// Removes a deleted job's files once it has ended (a running job is cancelled first, and its
// encode may still finish: the watch waits for it).
asio::awaitable<void> remove_when_finished(JobHandle job) {
  const JobResult r = co_await job.async_wait();
  if (r.output.empty()) co_return;
  std::error_code ec;
  fs::remove_all(r.output, ec);
  fs::remove(still_path(r.output, "thumbnail"), ec);
  fs::remove(still_path(r.output, "spritesheet"), ec);
  remove_kept_latents(r.output);
}

}  // namespace

// The ids DELETE removed, kept in a file of one id a line (appended, synced), so a deleted
// video stays deleted across restarts although the job store still records the job.
struct OpenAiVideos::Deleted {
  fs::path file;
  mutable std::mutex mutex;
  std::set<std::string, std::less<>> ids;

  void add(const std::string& id) {
    std::lock_guard lock(mutex);
    if (!ids.insert(id).second) return;
    append_line_durably(file, id + "\n");  // one short write a DELETE, not the whole set again
  }
};

OpenAiVideos::OpenAiVideos(JobService& jobs, Hooks hooks, asio::any_io_executor blocking)
    : jobs_(jobs), hooks_(std::move(hooks)), blocking_(std::move(blocking)), deleted_(std::make_shared<Deleted>()) {
  deleted_->file = jobs_.config().output_dir / ".vgen-videos-deleted";
  std::ifstream in(deleted_->file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) deleted_->ids.insert(line);
  OpenAiVideoEdits::Context edits{
      [this] { return served(); }, [this](const std::string& id) { return facts(id); },
      [this](const std::string& id) -> std::optional<OpenAiVideoEdits::Finished> {
        if (const auto job = jobs_.find(id)) {
          auto r = job->result();
          if (r.spec.prompt.empty())  // a fleet front end's job: the record's spec
            if (const auto record = find_record(id)) r.spec = spec_of(*record);
          return OpenAiVideoEdits::Finished{std::move(r.spec), std::move(r.output)};
        }
        if (const auto record = find_record(id)) return OpenAiVideoEdits::Finished{spec_of(*record), record->output};
        return std::nullopt;
      },
      hooks_.submit, [this](const JobHandle& job) { return facts_of(job); },
      // Not facts(): that reads edits_, which is being built when the remix log asks.
      [this](const std::string& id) { return !deleted(id) && (jobs_.find(id) || find_record(id)); }};
  edits_ = std::make_unique<OpenAiVideoEdits>(jobs_.config().output_dir, jobs_.config().videos.max_bytes, std::move(edits));
}

OpenAiVideos::~OpenAiVideos() { stills_.join(); }

std::vector<std::pair<std::string, std::string>> OpenAiVideos::routes() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& r : kRoutes) out.emplace_back(std::string(bhttp::to_string(r.method)), std::string(r.path));
  return out;
}

bool OpenAiVideos::serves(std::string_view path) {
  return path == "/v1/models" || path == "/v1/videos" || path.rfind("/v1/videos/", 0) == 0;
}

bool OpenAiVideos::deleted(std::string_view id) const {
  std::lock_guard lock(deleted_->mutex);
  return deleted_->ids.count(id) > 0;
}

asio::awaitable<http::Response> OpenAiVideos::handle(http::Request request) {
  const auto target = std::string_view(request.target());
  const std::string path(target.substr(0, target.find('?')));
  if (!http::bearer_authorized(request, jobs_.config().service.token))
    co_return openai::error_response({401, "authentication_error", "invalid_api_key",
                                      "missing or wrong bearer token (Authorization: Bearer <token>)", ""});
  const bool blocking = request.method() == bhttp::verb::post || request.method() == bhttp::verb::delete_;
  const bool still = path.size() > 8 && path.ends_with("/content") && target.find("variant=") != std::string_view::npos &&
                     target.find("variant=video") == std::string_view::npos;
  if (!blocking && !still) co_return dispatch(request, path);
  // Decodes, writes and fsyncs happen off the io threads; the response resumes on this strand.
  auto run = [this, &request, &path]() -> asio::awaitable<http::Response> { co_return dispatch(request, path); };
  if (still) co_return co_await asio::co_spawn(stills_, run, asio::use_awaitable);
  co_return co_await asio::co_spawn(blocking_, run, asio::use_awaitable);
}

http::Response OpenAiVideos::dispatch(const http::Request& request, std::string_view path) {
  try {
    std::string allow, id;
    for (const auto& r : kRoutes) {
      if (!match(r.path, path, id)) continue;
      if (r.method != request.method()) {
        allow += (allow.empty() ? "" : ", ") + std::string(bhttp::to_string(r.method));
        continue;
      }
      if (r.path == "/v1/models") return models();
      if (r.path == "/v1/videos/edits") return edits_->edit(request);
      if (r.path == "/v1/videos/extensions") return edits_->extend(request);
      if (r.path == "/v1/videos/{id}/remix") return edits_->remix(request, id);
      if (r.path == "/v1/videos") return r.method == bhttp::verb::post ? create(request) : list(request);
      if (r.path == "/v1/videos/{id}/content") return content(request, id);
      return r.method == bhttp::verb::get ? retrieve(id) : remove(id);
    }
    if (allow.empty())
      return openai::error_response({404, "invalid_request_error", "not_found", "no route for " + std::string(path), ""});
    auto res = openai::error_response({405, "invalid_request_error", "method_not_allowed",
                                       std::string(request.method_string()) + " is not allowed on " + std::string(path), ""});
    res.set(bhttp::field::allow, allow);
    return res;
  } catch (...) {
    return openai::error_response(openai::api_error(std::current_exception()));
  }
}

std::vector<ServedModel> OpenAiVideos::served() const {
  auto out = jobs_.served_models();
  if (!out.empty()) return out;
  const auto& config = jobs_.config();  // a fleet front end: the names, generic defaults
  out.push_back({(config.model.empty() ? default_model_dir() : config.model).filename().string(), {}, {}});
  for (const auto& [name, dir] : config.models) out.push_back({name, {}, {}});
  return out;
}

const ServedModel& OpenAiVideos::model_named(const std::vector<ServedModel>& served, std::string_view name) const {
  if (name.empty()) return served.front();
  for (const auto& m : served)
    if (m.name == name) return m;
  std::string known;
  for (const auto& m : served) known += (known.empty() ? "" : ", ") + m.name;
  throw_error(ErrorKind::invalid_argument, "model: '" + truncate_utf8(std::string(name), 60) + "' is not served here (GET /v1/models: " + known + ")");
}

http::Response OpenAiVideos::create(const http::Request& request) {
  const auto max_image = jobs_.config().images.max_bytes;
  json::object fields;
  std::vector<std::pair<std::string, std::string>> images;
  const bool multipart = http::has_content_type(request, "multipart/form-data");
  if (multipart) {  // what the SDK sends, with or without a file
    const auto it = request.find(bhttp::field::content_type);
    const auto parts = parse_multipart(request.body(), multipart_boundary(std::string_view(it->value().data(), it->value().size())),
                                       MultipartLimits{.max_parts = 32});
    for (const auto& part : parts) {
      if (part.name == "input_reference") {  // a file part
        if (part.body.size() > max_image)
          throw_error(ErrorKind::invalid_argument, "input_reference: larger than " + std::to_string(max_image) + " bytes");
        images.emplace_back("image", std::string(part.body));
      } else if (part.name == "input_reference[image_url]") {  // the SDK's {"image_url": ...} as form fields
        images.emplace_back("image", decode_image_text(part.body, "input_reference", max_image));
      } else if (part.name.rfind("input_reference[", 0) == 0) {
        throw_error(ErrorKind::invalid_argument, "input_reference: only a file or an image_url (a data URL) is accepted here");
      } else {
        fields[part.name] = std::string(part.body);
      }
    }
  } else {
    if (!http::has_content_type(request, "application/json"))
      return openai::error_response({415, "invalid_request_error", "unsupported_media_type",
                                     "Content-Type must be application/json or multipart/form-data", ""});
    boost::system::error_code ec;
    auto body = json::parse(request.body(), ec);
    if (ec || !body.is_object())
      throw_error(ErrorKind::invalid_argument, "request body: must be a JSON object (" + (ec ? ec.message() : "got another type") + ")");
    fields = std::move(body.as_object());
    if (const auto* ref = fields.if_contains("input_reference")) {
      const json::value* url = ref->is_object() ? ref->as_object().if_contains("image_url") : ref;
      if (url == nullptr || !url->is_string())
        throw_error(ErrorKind::invalid_argument, "input_reference: must be {\"image_url\": <a data URL or base64>}");
      images.emplace_back("image", decode_image_text(url->get_string(), "input_reference", max_image));
    }
  }
  const auto models = served();
  const auto* name = fields.if_contains("model");
  const auto& model = model_named(models, name && name->is_string() ? std::string_view(name->get_string()) : std::string_view());
  const json::value spec = openai::job_spec_from(fields, model, multipart);
  const auto job = hooks_.submit(spec, std::move(images));
  // A fleet front end's job carries no admitted spec, and the record facts_of would read
  // instead may not be written yet: the answer describes the spec sent.
  std::optional<JobSpec> submitted;
  if (job.result().spec.prompt.empty()) try {
      submitted = jobs_.validate(spec);
    } catch (const Error&) {  // (nothing better than the record then)
    }
  return json_body(200, openai::video_json(facts_of(job, submitted ? &*submitted : nullptr)));
}

http::Response OpenAiVideos::list(const http::Request& request) {
  std::size_t limit = 20;
  std::string after;
  bool ascending = false;
  for (const auto& [key, value] : http::parse_query(std::string_view(request.target()))) {
    if (key == "limit") {
      std::uint64_t n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size() || n < 1 || n > 100)
        throw_error(ErrorKind::invalid_argument, "limit: must be an integer in [1, 100] (got '" + truncate_utf8(value, 40) + "')");
      limit = static_cast<std::size_t>(n);
    } else if (key == "after") {
      after = value;
    } else if (key == "order") {
      if (value != "asc" && value != "desc")
        throw_error(ErrorKind::invalid_argument, "order: must be asc or desc (got '" + truncate_utf8(value, 40) + "')");
      ascending = value == "asc";
    } else {
      throw_error(ErrorKind::invalid_argument, truncate_utf8(key, 40) + ": unknown query parameter (known: after, limit, order)");
    }
  }
  // The store pages newest first by its own cursor; OpenAI's cursor is the last id seen. Walk
  // the store's pages past `after` until a page is full (descending) or all of them (ascending).
  std::vector<JobRecord> records;
  bool found = after.empty() || ascending;
  JobListQuery query;
  query.limit = 200;
  for (bool full = false; !full;) {
    auto page = jobs_.list_jobs(query);
    for (auto& r : page.jobs) {
      if (!found) found = r.id == after;  // a deleted video still marks its place
      else if (!ascending && deleted(r.id)) continue;  // ascending: after `after` is placed, below
      else if (records.push_back(std::move(r)); !ascending && records.size() > limit) full = true;
      if (full) break;
    }
    if (!page.next) break;
    query.before = page.next;
  }
  if (ascending) {
    std::reverse(records.begin(), records.end());
    if (!after.empty()) {
      const auto at = std::find_if(records.begin(), records.end(), [&](const JobRecord& r) { return r.id == after; });
      records.erase(records.begin(), at == records.end() ? at : at + 1);  // an unknown `after`: nothing follows it
    }
  }
  if (!found) records.clear();  // an id the store never recorded: nothing comes after it
  std::erase_if(records, [&](const JobRecord& r) { return deleted(r.id); });
  const bool more = records.size() > limit;
  if (records.size() > limit) records.resize(limit);
  json::array data;
  for (const auto& r : records) {
    const auto job = jobs_.find(r.id);
    data.push_back(openai::video_json(job ? facts_of(*job) : facts_of(r)));
  }
  json::object o{{"object", "list"}, {"has_more", more}};
  o["first_id"] = records.empty() ? json::value(nullptr) : json::value(records.front().id);
  o["last_id"] = records.empty() ? json::value(nullptr) : json::value(records.back().id);
  o["data"] = std::move(data);
  return json_body(200, o);
}

std::optional<openai::VideoFacts> OpenAiVideos::facts(const std::string& id) const {
  if (deleted(id)) return std::nullopt;
  if (const auto job = jobs_.find(id)) return facts_of(*job);
  if (const auto record = find_record(id)) return facts_of(*record);
  return std::nullopt;
}

std::optional<JobRecord> OpenAiVideos::find_record(const std::string& id) const {
  // Ids are UUIDv7: the store lists newest first, so the walk stops at the first record made
  // well before this id (a minute of slack for ids of other processes' clocks).
  const auto when = job_id_time(id);
  if (!when) return std::nullopt;
  JobListQuery query;
  query.limit = 200;
  for (;;) {
    const auto page = jobs_.list_jobs(query);
    for (const auto& r : page.jobs) {
      if (r.id == id) return r;
      if (const auto t = job_id_time(r.id); t && *t + std::chrono::minutes(1) < *when) return std::nullopt;
    }
    if (!page.next) return std::nullopt;
    query.before = page.next;
  }
}

openai::VideoFacts OpenAiVideos::facts_of(const JobHandle& job, const JobSpec* submitted) const {
  const auto r = job.result();
  const auto s = job.snapshot();
  auto spec = r.spec;
  if (spec.prompt.empty() && submitted) spec = *submitted;
  if (spec.prompt.empty())  // a fleet front end's job carries no admitted spec: the record's, parsed
    if (const auto record = find_record(r.id)) spec = spec_of(*record);
  openai::VideoFacts v;
  v.id = r.id;
  v.model = spec.model.empty() ? served().front().name : spec.model;
  v.prompt = spec.prompt;
  // From the result alone: it reads a job as finished only once its result (output) is
  // published, where the snapshot says done a moment before; completed then means downloadable.
  const bool finished = is_terminal(r.state);
  v.status = std::string(openai::status_of(to_string(r.state)));
  v.width = spec.width;
  v.height = spec.height;
  v.frames = spec.frames;
  v.fps = spec.fps;
  v.created_at = created_at(v.id, s.total_seconds);
  v.remixed_from = edits_->remixed_from(v.id);
  if (v.status == "completed") v.progress = 100;
  else if (v.status == "in_progress" && s.total > 0) v.progress = std::clamp(s.step * 100 / s.total, 0, 99);
  if (finished) {
    v.completed_at = v.created_at + static_cast<std::int64_t>(std::lround(s.total_seconds));
    v.expires_at = *v.completed_at + jobs_.config().job_ttl.count();  // then only the store's record is left
    if (r.state != JobState::done) {
      v.error_code = r.state == JobState::cancelled ? "cancelled" : std::string(r.error_kind ? to_string(*r.error_kind) : "internal");
      v.error_message = r.error;
    }
  }
  return v;
}

JobSpec OpenAiVideos::spec_of(const JobRecord& r) const {
  try {
    return jobs_.validate(r.spec);  // the model's defaults filled in
  } catch (const Error&) {          // a model no longer served: what the record says
    JobSpec spec;
    const auto get = [&](const char* k, double d) { const auto* p = r.spec.if_contains(k); return p && p->is_number() ? p->to_number<double>() : d; };
    spec.width = static_cast<int>(get("width", 0));
    spec.height = static_cast<int>(get("height", 0));
    spec.frames = static_cast<int>(get("frames", 0));
    spec.fps = get("fps", spec.fps);
    if (const auto* p = r.spec.if_contains("prompt"); p && p->is_string()) spec.prompt = p->get_string();
    if (const auto* p = r.spec.if_contains("model"); p && p->is_string()) spec.model = p->get_string();
    return spec;
  }
}

openai::VideoFacts OpenAiVideos::facts_of(const JobRecord& r) const {
  openai::VideoFacts v;
  v.id = r.id;
  const auto spec = spec_of(r);
  v.model = spec.model.empty() ? served().front().name : spec.model;
  v.prompt = spec.prompt;
  v.status = std::string(openai::status_of(r.status));
  v.width = spec.width;
  v.height = spec.height;
  v.frames = spec.frames;
  v.fps = spec.fps;
  v.created_at = created_at(r.id, 0);
  v.remixed_from = edits_->remixed_from(v.id);
  if (v.status == "completed") v.progress = 100;
  else if (r.total > 0) v.progress = std::clamp(r.step * 100 / r.total, 0, 99);
  if (r.finished_unix > 0) {
    v.completed_at = static_cast<std::int64_t>(r.finished_unix);
    v.expires_at = std::nullopt;  // the runtime forgot it; its record stays
  }
  if (v.status == "failed") {
    v.error_code = r.status == "cancelled" ? "cancelled" : (r.error_kind.empty() ? "internal" : r.error_kind);
    v.error_message = r.error;
  }
  return v;
}

http::Response OpenAiVideos::retrieve(const std::string& id) {
  const auto v = facts(id);
  if (!v) throw_error(ErrorKind::not_found, "video '" + truncate_utf8(id, 60) + "' not found");
  return json_body(200, openai::video_json(*v));
}

http::Response OpenAiVideos::remove(const std::string& id) {
  if (deleted(id)) throw_error(ErrorKind::not_found, "video '" + truncate_utf8(id, 60) + "' not found");
  if (auto job = jobs_.find(id)) {
    deleted_->add(id);  // from now on 404 in both APIs, whatever the job still does
    if (!job->finished()) hooks_.cancel(*job, "deleted by DELETE /v1/videos/" + id);
    asio::co_spawn(jobs_.executor(), remove_when_finished(*job), asio::detached);
  } else if (const auto record = find_record(id)) {  // ended long ago: only its files are left
    deleted_->add(id);
    std::error_code ec;
    if (!record->output.empty()) {
      fs::remove_all(record->output, ec);
      fs::remove(still_path(record->output, "thumbnail"), ec);
      fs::remove(still_path(record->output, "spritesheet"), ec);
      remove_kept_latents(record->output);
    }
  } else {
    throw_error(ErrorKind::not_found, "video '" + truncate_utf8(id, 60) + "' not found");
  }
  edits_->forget(id);
  return json_body(200, {{"id", id}, {"object", "video.deleted"}, {"deleted", true}});
}

http::Response OpenAiVideos::content(const http::Request& request, const std::string& id) {
  std::string variant = "video";
  for (const auto& [key, value] : http::parse_query(std::string_view(request.target()))) {
    if (key == "live") continue;  // read below
    if (key != "variant") throw_error(ErrorKind::invalid_argument, truncate_utf8(key, 40) + ": unknown query parameter (known: variant, live)");
    if (value != "video" && value != "thumbnail" && value != "spritesheet")
      throw_error(ErrorKind::invalid_argument, "variant: must be video, thumbnail or spritesheet (got '" + truncate_utf8(value, 40) + "')");
    variant = value;
  }
  const bool live = http::wants_live(std::string_view(request.target()));
  if (live && variant != "video") throw_error(ErrorKind::invalid_argument, "live: only the video variant streams");
  const auto v = facts(id);
  if (!v) throw_error(ErrorKind::not_found, "video '" + truncate_utf8(id, 60) + "' not found");
  if (const auto job = live ? jobs_.find(id) : std::nullopt)  // a running job: its video as it is encoded
    if (auto stream = http::live_video_response(jobs_, *job)) return std::move(*stream);
  if (v->status != "completed")
    return openai::error_response({409, "invalid_request_error", "video_not_ready",
                                   "video '" + id + "' is " + v->status + (v->status == "failed" ? ": it has no content" : "; its content comes once it is completed"), ""});
  fs::path output;
  std::string content_type;
  if (const auto job = jobs_.find(id)) {
    const auto r = job->result();
    output = r.output, content_type = r.content_type;
  } else if (const auto record = find_record(id)) {
    output = record->output, content_type = record->content_type;
  }
  std::error_code ec;
  if (output.empty() || fs::is_directory(output, ec))
    return openai::error_response({409, "invalid_request_error", "no_video_file",
                                   "video '" + id + "' was written as a frame directory (format png), not a video file", ""});
  if (variant == "video") return http::file_response(request, output, content_type);
  const auto still = still_path(output, variant);
  const auto made = fs::last_write_time(still, ec);
  if (ec || made < fs::last_write_time(output)) {  // first asked, or the video was written again
    if (variant == "thumbnail") write_thumbnail(output, still);
    else write_spritesheet(output, still);
  }
  return http::file_response(request, still, variant == "thumbnail" ? "image/png" : "image/jpeg");
}

http::Response OpenAiVideos::models() {
  json::array data;
  for (const auto& m : served()) {
    json::object vgen{{"fps", m.defaults.fps}, {"size", std::to_string(m.defaults.width) + "x" + std::to_string(m.defaults.height)},
                      {"seconds", openai::seconds_text(m.defaults.frames, m.defaults.fps)},
                      {"image", m.limits.image == InputUse::none ? "none" : m.limits.image == InputUse::optional ? "optional" : "required"}};
    data.push_back(json::object{{"id", m.name}, {"object", "model"}, {"created", 0}, {"owned_by", "vgen"}, {"vgen", std::move(vgen)}});
  }
  return json_body(200, {{"object", "list"}, {"data", std::move(data)}});
}

}  // namespace vgen
