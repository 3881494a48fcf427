// A link seam for the HTTP harness: definitions of the vgen::Runtime and vgen::JobHandle
// members that api/http/http_api.cpp calls, without LibTorch, a model or threads. The real ones
// live in api/engine.cpp (which needs LibTorch); the harness links this file instead, so
// HttpApi's own code (routing, auth, Content-Type, JSON bodies, status/video/cancel/events
// handlers) runs unchanged.
//
// Fixed jobs, so that every run is reproducible: "done" (a 4 KiB video file), "frames" (a
// frame directory), "failed", "queued". try_submit validates the spec with parse_job_spec and
// the default SpecLimits (the real Runtime validates against the package's limits), answers
// Error(overloaded) for seeds ending in 15 mod 16, and returns a new queued job that find()
// never sees. cancel() changes nothing. Files live in a temporary directory removed at exit.
#include "api/engine.hpp"

#include <boost/asio/io_context.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace vgen {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace detail {

struct JobEntry {
  JobResult result;
  bool finished = false;
  int step = 0, total = 0;
};

class RuntimeImpl {
 public:
  explicit RuntimeImpl(RuntimeConfig c) : config(std::move(c)) {
    dir = fs::temp_directory_path() / ("vgen-fuzz-http-" + std::to_string(::getpid()));
    fs::create_directories(dir / "frames");
    config.output_dir = dir;  // HttpApi's uploads folder (dir/uploads), swept at start
    std::ofstream(dir / "video.mp4", std::ios::binary) << std::string(4096, 'v');
    add("done", JobState::done, true, dir / "video.mp4");
    add("frames", JobState::done, true, dir / "frames");
    add("failed", JobState::failed, true, {}, ErrorKind::internal, "boom");
    add("queued", JobState::queued, false);
  }
  ~RuntimeImpl() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  static JobHandle handle(std::shared_ptr<JobEntry> e) { return JobHandle(std::move(e)); }

  RuntimeConfig config;
  fs::path dir;
  boost::asio::io_context io;  // never run: upload watchers spawned on it just end with it
  std::map<std::string, std::shared_ptr<JobEntry>, std::less<>> jobs;

 private:
  void add(const std::string& id, JobState state, bool finished, fs::path output = {},
           std::optional<ErrorKind> kind = {}, std::string error = {}) {
    auto e = std::make_shared<JobEntry>();
    e->result.id = id;
    e->result.state = state;
    e->result.output = std::move(output);
    e->result.content_type = "video/mp4";
    e->result.device = "cpu";
    e->result.error_kind = kind;
    e->result.error = std::move(error);
    e->result.spec.prompt = "a red circle";
    e->finished = finished;
    e->total = 20;
    jobs.emplace(id, std::move(e));
  }
};

}  // namespace detail

Runtime::Runtime(RuntimeConfig config) : impl_(std::make_unique<detail::RuntimeImpl>(std::move(config))) {}
Runtime::~Runtime() = default;

JobHandle Runtime::try_submit(json::value spec, SubmitOptions) {
  const auto s = parse_job_spec(spec, JobSpec{}, SpecLimits{});
  if (s.seed % 16 == 15) throw_error(ErrorKind::overloaded, "the job queue is full (fake)");
  auto e = std::make_shared<detail::JobEntry>();
  e->result.id = "job-new";
  e->result.spec = s;
  e->total = s.steps;
  return detail::RuntimeImpl::handle(std::move(e));
}

std::optional<JobHandle> Runtime::find(const std::string& id) const {
  const auto it = impl_->jobs.find(id);
  if (it == impl_->jobs.end()) return std::nullopt;
  return detail::RuntimeImpl::handle(it->second);
}

// The fixed jobs, newest (by name) first; `before` counts from the end of that order.
JobPage Runtime::list_jobs(const JobListQuery& query) const {
  JobPage page;
  std::uint64_t position = impl_->jobs.size();
  for (auto it = impl_->jobs.rbegin(); it != impl_->jobs.rend(); ++it, --position) {
    if (query.before != 0 && position >= query.before) continue;
    JobRecord r;
    r.id = it->first;
    r.status = std::string(to_string(it->second->result.state));
    if (!query.status.empty() && r.status != query.status) continue;
    if (page.jobs.size() == std::max<std::size_t>(query.limit, 1)) {
      page.next = position + 1;
      break;
    }
    page.jobs.push_back(std::move(r));
  }
  return page;
}
bool Runtime::previews(const std::string&) const { return false; }
std::vector<ServedModel> Runtime::served_models() const { return {}; }  // the config's names (OpenAiVideos)

const RuntimeConfig& Runtime::config() const { return impl_->config; }
JobSpec Runtime::validate(const json::value& spec) const { return parse_job_spec(spec, JobSpec{}, SpecLimits{}); }
std::vector<JobHandle> Runtime::unfinished() const { return {}; }
boost::asio::any_io_executor Runtime::executor() const { return impl_->io.get_executor(); }
std::string Runtime::metrics_text() const { return "# TYPE vgen_jobs_submitted_total counter\nvgen_jobs_submitted_total 0\n"; }

const std::string& JobHandle::id() const { return entry_->result.id; }
bool JobHandle::finished() const { return entry_->finished; }
bool JobHandle::cancel(std::string) { return !entry_->finished; }
JobResult JobHandle::result() const { return entry_->result; }
boost::asio::awaitable<JobResult> JobHandle::async_wait() const { co_return entry_->result; }
std::size_t JobHandle::subscribe(JobEventHandler) const { return 0; }
std::shared_ptr<const JobPreview> JobHandle::preview() const { return nullptr; }
void JobHandle::unsubscribe(std::size_t) const {}

JobSnapshot JobHandle::snapshot() const {
  JobSnapshot s;
  s.id = entry_->result.id;
  s.state = entry_->result.state;
  s.step = entry_->step;
  s.total = entry_->total;
  s.error_kind = entry_->result.error_kind;
  s.error = entry_->result.error;
  return s;
}


}  // namespace vgen
