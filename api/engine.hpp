// vgen::Runtime: the embedding API. A service or tool creates one Runtime (it loads the model
// package once and owns the threads, device pool and pipeline), submits job specs and gets a
// JobHandle back: progress, cancel, and the result as a future or an awaitable.
//
//   vgen::Runtime rt(vgen::load_config("configs/cpu.json"));
//   auto job = rt.submit({{"prompt", "a red circle moving left"}, {"name", "clip"}});
//   vgen::JobResult r = job.wait();   // r.output == "<output_dir>/clip.mp4"
//
// Job specs are JSON objects (fields in stages/job_spec.hpp); a bad spec throws
// Error(invalid_argument) from submit() naming the field, before anything is queued.
//
// Result cache: a job whose spec (all fields but "name") equals an earlier finished job's, on
// the same model, is served by copying that job's output (verified to still be complete)
// instead of rendering again; a duplicate submitted while the first is still running waits
// for it. JobResult::cache_hit tells which. Entries expire after result_cache_ttl.
//
// Threads: the constructor starts the io threads and one worker pool per device plus "codec".
// Thread-safety: every member may be called from any thread, except that submit() with
// wait_for_room (the default) blocks and must not be called on the Runtime's io threads
// (use try_submit() or async_submit() there).
// Lifetime: the destructor cancels unfinished jobs and joins the threads (shutdown()); handles
// stay valid afterwards (they own their job).
#pragma once

#include "api/config.hpp"
#include "api/job_service.hpp"
#include "runtime/errors.hpp"
#include "runtime/job.hpp"
#include "runtime/job_store.hpp"
#include "runtime/ttl_cache.hpp"
#include "stages/exec/denoise_news.hpp"
#include "stages/job_spec.hpp"
#include "stages/model/model_package.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>

#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace vgen {

class Tracer;  // runtime/trace.hpp

struct JobResult {
  std::string id;
  JobState state = JobState::queued;  // done | failed | cancelled once finished
  std::string stage;                  // while running: the stage (its name is the status)
  std::filesystem::path output;       // set when done
  std::string content_type;           // e.g. "video/mp4"
  std::string device;
  bool cache_hit = false;             // copied from an identical earlier job
  bool text_cache_hit = false;
  int retries = 0;
  int resumed_from_step = 0;          // > 0: denoising went on from a checkpoint at this step
  double seconds = 0;
  std::map<std::string, double> stage_seconds;
  std::optional<ErrorKind> error_kind;
  std::string error;
  JobSpec spec;
};
boost::json::object to_json(const JobResult& result);

struct RuntimeStats {
  std::uint64_t submitted = 0, rejected = 0, done = 0, failed = 0, cancelled = 0;
  std::size_t in_flight = 0, queued = 0, queue_capacity = 0;
  std::uint64_t result_cache_hits = 0;
  CacheStats text_cache, result_cache;
};

class JobHandle;
namespace detail {
struct JobEntry;
class RuntimeImpl;
// A handle on an entry made outside the Runtime (the fleet client, api/fleet_client.hpp).
JobHandle make_job_handle(std::shared_ptr<JobEntry> entry);
}  // namespace detail

class JobHandle {
 public:
  JobHandle() = default;
  const std::string& id() const;
  JobSnapshot snapshot() const;     // state, step/total, timings, error so far
  bool finished() const;
  bool cancel(std::string reason = "cancelled by request");
  JobResult result() const;         // the result so far (final once finished()); spec as admitted
  JobResult wait() const;           // blocks until finished (not on an io thread)
  std::shared_future<JobResult> future() const;
  // The latest preview image while it denoises (RuntimeConfig::preview_every); nullptr if none.
  std::shared_ptr<const JobPreview> preview() const;
  boost::asio::awaitable<JobResult> async_wait() const;
  // Progress events of this job from now on (called on the thread making the transition).
  std::size_t subscribe(JobEventHandler handler) const;
  void unsubscribe(std::size_t token) const;
  explicit operator bool() const noexcept { return entry_ != nullptr; }

 private:
  friend class detail::RuntimeImpl;
  friend JobHandle detail::make_job_handle(std::shared_ptr<detail::JobEntry>);
  explicit JobHandle(std::shared_ptr<detail::JobEntry> entry) : entry_(std::move(entry)) {}
  std::shared_ptr<detail::JobEntry> entry_;
};

struct SubmitOptions {
  std::string id;                            // empty: generated (a UUIDv7, runtime/job_id.hpp)
  JobEventHandler on_progress;               // this job's events, from submission on (a new preview: event.preview)
  std::optional<std::chrono::milliseconds> deadline;
  bool resuming = false;                     // the store's own unfinished job, resubmitted under its id
};

class Runtime : public JobService {  // JobService: the interface the fleet client shares
 public:
  // Loads the model (Error(invalid_argument / not_found) naming what is wrong) and starts.
  explicit Runtime(RuntimeConfig config);
  ~Runtime() override;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Validates and queues; waits while the first queue is full.
  JobHandle submit(boost::json::value spec, SubmitOptions options = {}) override;
  // Never waits: Error(overloaded) when the queue is full or the runtime is shutting down.
  JobHandle try_submit(boost::json::value spec, SubmitOptions options = {}) override;
  boost::asio::awaitable<JobHandle> async_submit(boost::json::value spec, SubmitOptions options = {}) override;
  // Parses a spec against the model's defaults and limits without submitting it.
  JobSpec validate(const boost::json::value& spec) const override;
  JobSpec admit(boost::json::value& spec) const override;
  // The content key (hex) of a parsed spec on its model: what the output's "vgen:" tag holds.
  std::string content_key(const JobSpec& spec) const;
  // Whether the job store records `path` as the finished output of a job with spec's key.
  bool has_rendered(const JobSpec& spec, const std::filesystem::path& path) const;

  // Unfinished jobs and finished ones for job_ttl after they ended.
  std::optional<JobHandle> find(const std::string& id) const override;
  // The jobs not finished yet, resumed ones included (their result().spec is set), in no order.
  std::vector<JobHandle> unfinished() const override;
  // Jobs the job store recorded, newest accepted first (JobStore::list; blocks on its file).
  JobPage list_jobs(const JobListQuery& query) const override;
  // Whether jobs of model `model` (empty: the default) get previews (preview_every and factors).
  bool previews(const std::string& model = {}) const override;
  std::vector<ServedModel> served_models() const override;  // every loaded package, the default first
  bool cancel(const std::string& id, std::string reason = "cancelled by request") override;
  // The job's video as it is encoded (mp4 jobs), opened for one more reader; nullptr for a job
  // that is unknown or has ended. Opening it before the job's encode starts is what makes the
  // encode write it (ModelSetOptions::live); opened later, it ends without bytes when the job does.
  std::shared_ptr<LiveBroadcast> live_stream(const std::string& id) const override;

  void drain();     // stops intake, waits for every accepted job to end
  void shutdown();  // cancels unfinished jobs, then drains; idempotent

  const RuntimeConfig& config() const override;
  const ModelPackage& package() const;
  RuntimeStats stats() const;
  std::string metrics_text() const override;  // Prometheus text exposition
  boost::asio::any_io_executor executor() const override;  // the io threads (for servers built on it)
  // The runtime's trace recorder (runtime/trace.hpp): captures of its timeline, e.g. GET /v1/trace.
  Tracer& tracer() const override;

 private:
  std::unique_ptr<detail::RuntimeImpl> impl_;
};

}  // namespace vgen
