#include "api/engine.hpp"

#include "api/job_entry.hpp"

#include "api/journal.hpp"
#include "runtime/content_key.hpp"
#include "runtime/device_pool.hpp"
#include "runtime/executor.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/metrics.hpp"
#include "runtime/pipeline.hpp"
#include "stages/encode.hpp"
#include "stages/torch_devices.hpp"
#include "stages/wan_pipeline.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <random>

namespace vgen {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace detail {

// What the result cache remembers about a finished job's output.
struct CachedOutput {
  fs::path path;
  std::uintmax_t bytes = 0;
  fs::file_time_type mtime;
};

namespace {

std::string content_type_of(const std::string& format) { return format == "png" ? "inode/directory" : content_type_for(format); }

// Copies a finished output to `to` atomically (temp + rename), files and png directories alike.
void copy_output(const fs::path& from, const fs::path& to) {
  if (fs::equivalent(from, to)) return;
  std::random_device rd;
  const auto tmp = to.parent_path() / ("." + to.filename().string() + ".tmp-" + std::to_string(rd()));
  try {
    if (fs::is_directory(from)) fs::copy(from, tmp, fs::copy_options::recursive);
    else fs::copy_file(from, tmp);
    if (fs::is_directory(to)) fs::remove_all(to);
    fs::rename(tmp, to);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

bool still_valid(const CachedOutput& c) {
  std::error_code ec;
  if (fs::is_directory(c.path, ec)) return true;
  return fs::is_regular_file(c.path, ec) && fs::file_size(c.path, ec) == c.bytes && fs::last_write_time(c.path, ec) == c.mtime;
}

}  // namespace

class RuntimeImpl {
 public:
  explicit RuntimeImpl(RuntimeConfig config)
      : config_(std::move(config)),
        executor_(Executor::Options{.io_threads = config_.io_threads,
                                    .spin = std::chrono::microseconds(config_.spin_us)}),
        result_cache_(TtlCacheOptions{.max_entries = std::max<std::size_t>(config_.result_cache_entries, 1),
                                      .default_ttl = config_.result_cache_ttl}) {
    if (config_.model.empty()) config_.model = default_model_dir();
    std::error_code ec;
    fs::create_directories(config_.output_dir, ec);
    if (!fs::is_directory(config_.output_dir))
      throw_error(ErrorKind::invalid_argument, "output directory '" + config_.output_dir.string() + "' cannot be created" +
                                                   (ec ? " (" + ec.message() + ")" : ""));
    // A CPU device admits as many concurrent leases as it has compute threads, so that with
    // threads.per_device > 1 preprocess, denoise and decode of different jobs overlap.
    const auto devices = parse_device_list(config_.devices, discover_cuda_devices, 0.9, config_.threads_per_device);
    std::size_t intra = config_.intra_op_threads;
    if (intra == 0) intra = static_cast<std::size_t>(default_intra_op_threads(devices.size() * config_.threads_per_device));
    add_device_pools(executor_, devices, config_.threads_per_device, config_.codec_threads,
                     [intra](std::size_t) { set_intra_op_threads(static_cast<int>(intra)); });
    devices_ = std::make_unique<DevicePool>(devices, DevicePoolOptions{.policy = config_.device_policy, .metrics = &metrics_});
    WanRuntimeOptions wo;
    wo.out_dir = config_.output_dir;
    wo.encode = EncodeOptions{.crf = config_.encoder_crf, .preset = config_.encoder_preset, .threads = config_.encoder_threads};
    wo.text_cache_entries = config_.text_cache_entries;
    wo.text_cache_ttl = config_.text_cache_ttl;
    wo.preprocess_workers = config_.preprocess.workers;
    wo.denoise_workers = config_.denoise.workers;
    wo.decode_workers = config_.decode.workers;
    wo.encode_workers = config_.encode.workers;
    if (const char* env = std::getenv("VGEN_FAULTS"); env && *env) {
      boost::system::error_code ec;
      auto v = json::parse(env, ec);
      if (ec || !v.is_object()) throw_error(ErrorKind::invalid_argument, "VGEN_FAULTS: must be a JSON object");
      config_.faults = parse_fault_plan(v.get_object(), "VGEN_FAULTS");
    }
    if (config_.faults.enabled()) {
      faults_ = std::make_unique<FaultInjector>(config_.faults);
      spdlog::warn("fault injection is on: {}", "see the config's \"faults\" or $VGEN_FAULTS");
      if (config_.faults.oom_rate > 0 || config_.faults.oom_above_batch > 0)
        wo.before_denoise = [f = faults_.get()](std::size_t jobs, const std::string& device, const std::string& job, int attempt) {
          f->check_oom(jobs, device, job, attempt);
        };
    }
    wo.max_batch = config_.max_batch;
    wo.metrics = &metrics_;
    wo.batch_wait = config_.batch_wait;
    wan_ = make_wan_runtime(config_.model, executor_, *devices_, wo);
    if (config_.warmup) warm_up_devices(devices);
    PipelineOptions po;
    po.metrics = &metrics_;
    po.on_event = [this](const JobEvent& e) {
      if (auto entry = lookup(e.job_id)) entry->emit(e);
    };
    pipeline_ = std::make_unique<Pipeline>(executor_.get_executor(), make_stages(), po);
    pipeline_->start();
    if (!config_.journal.empty()) open_journal();
  }

  // config.warmup: each device's compute thread calls every module twice before any job
  // (stages/wan_pipeline.hpp warm_up); the constructor returns once all are warm.
  void warm_up_devices(const std::vector<DeviceSpec>& devices) {
    for (const auto& d : devices) {
      const auto t0 = std::chrono::steady_clock::now();
      auto task = [this, id = d.id] {
        warm_up(*wan_, id);
        return 0;
      };
      executor_.pool(device_pool_name(d.id)).run(std::move(task), asio::use_future).get();
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
      metrics_.gauge("vgen_warmup_seconds", "Start-up warm-up of the model on a device", {{"device", d.id}}).set(took.count());
      spdlog::info("warmed up the model on {} in {:.2f} s", d.id, took.count());
    }
  }

  ~RuntimeImpl() { shutdown(); }

  JobHandle submit(json::value spec, SubmitOptions o, bool wait) {
    const auto parsed = validate(spec);
    auto entry = register_entry(o);
    try {
      journal_submitted(*entry, parsed, spec);
      std::shared_ptr<Job> job;
      if (wait) job = executor_.run_sync(pipeline_->submit(std::move(spec), entry->id, deadline_of(o)));
      else job = pipeline_->try_submit(std::move(spec), entry->id, deadline_of(o));
      return admitted(entry, std::move(job));
    } catch (...) {
      unregister(entry->id);
      throw;
    }
  }

  asio::awaitable<JobHandle> async_submit(json::value spec, SubmitOptions o) {
    const auto parsed = validate(spec);
    auto entry = register_entry(o);
    std::shared_ptr<Job> job;
    try {
      journal_submitted(*entry, parsed, spec);
      std::string id = entry->id;  // named locals, not temporaries, in the co_await (GCC 12)
      const auto deadline = deadline_of(o);
      job = co_await pipeline_->submit(std::move(spec), std::move(id), deadline);
    } catch (...) {
      unregister(entry->id);
      throw;
    }
    co_return admitted(entry, std::move(job));
  }

  JobSpec validate(const json::value& spec) const { return parse_wan_job(package_of(*wan_), spec); }

  std::optional<JobHandle> find(const std::string& id) {
    expire_finished();
    if (auto e = lookup(id)) return JobHandle(e);
    if (auto e = from_journal(id)) return JobHandle(e);
    return std::nullopt;
  }

  bool cancel(const std::string& id, std::string reason) { return pipeline_->cancel(id, std::move(reason)); }

  void drain() {
    if (drained_.exchange(true)) return;
    executor_.run_sync(pipeline_->drain());
    executor_.run_sync(wait_watchers());
  }

  void shutdown() {
    if (!drained_.exchange(true)) {
      executor_.run_sync(pipeline_->shutdown());
      executor_.run_sync(wait_watchers());
    }
    executor_.stop();
  }

  RuntimeStats stats() const {
    const auto c = pipeline_->counts();
    RuntimeStats s{c.submitted, c.rejected, c.done, c.failed, c.cancelled, c.in_flight, pipeline_->queue_depth(0),
                   config_.preprocess.queue, result_hits_.load(), text_cache_stats(*wan_), result_cache_.stats()};
    return s;
  }

  std::string metrics_text() {
    {
      std::lock_guard lock(publish_mutex_);
      publish_cache_stats(metrics_, "text", text_cache_stats(*wan_), last_text_);
      publish_cache_stats(metrics_, "results", result_cache_.stats(), last_results_);
    }
    return metrics_.render_prometheus();
  }

  const RuntimeConfig& config() const { return config_; }
  const ModelPackage& package() const { return package_of(*wan_); }
  asio::any_io_executor executor() { return executor_.get_executor(); }

 private:
  std::shared_ptr<JobEntry> lookup(const std::string& id) const {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : it->second;
  }

  std::optional<Job::clock::time_point> deadline_of(const SubmitOptions& o) const {
    if (!o.deadline) return std::nullopt;
    return Job::clock::now() + *o.deadline;
  }

  std::shared_ptr<JobEntry> register_entry(const SubmitOptions& o) {
    auto entry = std::make_shared<JobEntry>();
    std::lock_guard lock(mutex_);
    entry->id = o.id.empty() ? "job-" + std::to_string(++next_id_) : o.id;
    if (o.id.empty()) {
      while (entries_.count(entry->id)) entry->id = "job-" + std::to_string(++next_id_);
    } else if (entries_.count(entry->id)) {
      throw_error(ErrorKind::invalid_argument, "id: a job with id '" + o.id + "' already exists");
    }
    if (o.on_progress) entry->listeners.emplace(entry->next_listener++, o.on_progress);
    entries_.emplace(entry->id, entry);
    return entry;
  }

  void unregister(const std::string& id) {
    {
      std::lock_guard lock(mutex_);
      entries_.erase(id);
    }
    if (journal_) journal_->forget(id);  // never acknowledged
  }

  // ---- journal ----

  void journal_submitted(const JobEntry& entry, const JobSpec& spec, const json::value& raw) {
    if (journal_) journal_->record_submitted(entry.id, job_content_key(package().id(), spec).hex(), raw.as_object());
  }

  void journal_finished(const JobResult& r) {
    if (!journal_) return;
    JournalRecord rec;
    rec.id = r.id;
    rec.status = std::string(to_string(r.state));
    rec.output = r.output.string();
    std::error_code ec;
    if (r.state == JobState::done && fs::is_regular_file(r.output, ec)) rec.output_bytes = fs::file_size(r.output, ec);
    rec.content_type = r.content_type;
    if (r.error_kind) rec.error_kind = std::string(to_string(*r.error_kind));
    rec.error = r.error;
    rec.seconds = r.seconds;
    rec.retries = r.retries;
    rec.cache_hit = r.cache_hit;
    try {
      journal_->record_finished(rec);
    } catch (const std::exception& e) {
      spdlog::error("journal: could not record the end of {}: {}", r.id, e.what());
    }
  }

  void open_journal() {
    journal_ = std::make_unique<Journal>(config_.journal);
    {
      std::lock_guard lock(mutex_);
      next_id_ = std::max<std::uint64_t>(next_id_, journal_->max_job_number("job-"));
    }
    if (!config_.resume_journal) {
      journal_->mark_unfinished_interrupted();
      return;
    }
    auto records = journal_->unfinished();
    if (records.empty()) return;
    spdlog::info("journal {}: resuming {} unfinished job(s)", config_.journal.string(), records.size());
    asio::co_spawn(executor_.get_executor(), resume(std::move(records)), asio::detached);
  }

  // Resubmits a crashed runtime's unfinished jobs under their ids (waiting for queue room).
  asio::awaitable<void> resume(std::vector<JournalRecord> records) {
    for (auto& rec : records) {
      try {
        // Named locals: GCC 12 mishandles class temporaries inside a co_await expression.
        SubmitOptions options;
        options.id = rec.id;
        json::value spec(rec.spec);
        co_await async_submit(std::move(spec), std::move(options));
      } catch (const std::exception& e) {
        rec.status = "failed";
        rec.error_kind = "invalid_argument";
        rec.error = std::string("could not resume: ") + e.what();
        journal_->record_finished(rec);
      }
    }
  }

  // A job finished before a restart, as recorded in the journal.
  std::shared_ptr<JobEntry> from_journal(const std::string& id) {
    if (!journal_) return nullptr;
    auto rec = journal_->find(id);
    if (!rec || rec->status == "queued") return nullptr;
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (now - rec->finished_unix > static_cast<double>(config_.job_ttl.count())) return nullptr;  // kept as long as in memory
    auto entry = std::make_shared<JobEntry>();
    entry->id = id;
    JobResult r;
    r.id = id;
    r.state = rec->status == "done" ? JobState::done : rec->status == "failed" ? JobState::failed : JobState::cancelled;
    r.output = rec->output;
    r.content_type = rec->content_type;
    r.cache_hit = rec->cache_hit;
    r.retries = rec->retries;
    r.seconds = rec->seconds;
    r.error = rec->error.empty() && rec->status == "interrupted" ? "interrupted by a restart" : rec->error;
    if (r.state != JobState::done) r.error_kind = rec->error_kind == "internal" || rec->error_kind.empty() ? ErrorKind::internal : ErrorKind::cancelled;
    try {
      r.spec = validate(json::value(rec->spec));
    } catch (...) {
    }
    entry->final_result = r;
    entry->ended_at = std::chrono::steady_clock::now();
    entry->promise.set_value(r);
    entry->ended.set();
    std::lock_guard lock(mutex_);
    return entries_.emplace(id, entry).first->second;
  }

  JobHandle admitted(const std::shared_ptr<JobEntry>& entry, std::shared_ptr<Job> job) {
    {
      std::lock_guard lock(entry->mutex);
      entry->job = job;
    }
    watchers_.fetch_add(1);
    asio::co_spawn(executor_.get_executor(), watch(entry, std::move(job)), asio::detached);
    return JobHandle(entry);
  }

  // Waits for the job's end, then publishes its result (future, cache, in-flight map).
  asio::awaitable<void> watch(std::shared_ptr<JobEntry> entry, std::shared_ptr<Job> job) {
    co_await job->finished_event().wait();
    finalize(*entry, *job);
    job->payload.reset();  // the result is copied out: free the job's tensors (frames, latents) now
    watchers_.fetch_sub(1);
  }

  // Every watcher has published its job's result (they run right after the jobs end).
  asio::awaitable<void> wait_watchers() {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    while (watchers_.load() > 0) {
      timer.expires_after(std::chrono::milliseconds(2));
      co_await timer.async_wait(asio::use_awaitable);
    }
  }

  void finalize(JobEntry& entry, const Job& job) {
    JobResult r = result_of(entry, job);
    if (r.state == JobState::done && !r.cache_hit && entry.key && config_.result_cache_entries > 0) {
      std::error_code ec;
      CachedOutput c{r.output, fs::is_regular_file(r.output, ec) ? fs::file_size(r.output, ec) : 0,
                     fs::last_write_time(r.output, ec)};
      if (!ec) result_cache_.put(*entry.key, c);
    }
    if (entry.leader) {
      std::lock_guard lock(mutex_);
      if (auto it = inflight_.find(*entry.key); it != inflight_.end() && it->second.get() == &entry) inflight_.erase(it);
    }
    {
      std::lock_guard lock(entry.mutex);
      entry.final_result = r;
      entry.ended_at = std::chrono::steady_clock::now();
    }
    journal_finished(r);  // before the result is visible: a client that saw it, the journal has it
    entry.promise.set_value(r);
    entry.ended.set();
  }

 public:
  JobResult result_of(const JobEntry& entry, const Job& job) const {
    const auto s = job.snapshot();
    JobResult r;
    r.id = s.id;
    r.state = s.state;
    r.retries = s.attempts;
    r.seconds = s.total_seconds;
    r.stage_seconds = s.stage_seconds;
    r.error_kind = s.error_kind;
    r.error = s.error;
    r.cache_hit = entry.cache_hit.load();
    try {
      r.spec = validate(job.spec());
    } catch (...) {
    }
    r.content_type = content_type_of(r.spec.format);
    if (s.state == JobState::done) {
      if (r.cache_hit) {
        r.output = entry.cached_output;
      } else {
        const auto w = wan_job_result(job);
        r.output = w.output;
        r.device = w.device;
        r.text_cache_hit = w.text_cache_hit;
        r.spec = w.spec;
      }
    }
    return r;
  }

 private:
  void expire_finished() {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      bool old = false;
      {
        std::lock_guard l(it->second->mutex);
        old = it->second->final_result && now - it->second->ended_at > config_.job_ttl;
      }
      it = old ? entries_.erase(it) : std::next(it);
    }
  }

  // The first stage: serve the job from the result cache or from an identical job in flight.
  asio::awaitable<void> lookup_stage(Job& job) {
    auto entry = lookup(job.id());
    if (!entry || config_.result_cache_entries == 0) co_return;
    const auto spec = validate(job.spec());
    entry->key = job_content_key(package().id(), spec);
    const auto out = config_.output_dir / ((spec.name.empty() ? job.id() : spec.name) + extension_for(spec.format));
    for (;;) {
      auto hit = result_cache_.get(*entry->key);
      if (hit && !still_valid(*hit)) {  // the file changed or went away: render again
        result_cache_.erase(*entry->key);
        hit.reset();
      }
      if (hit) {
        auto copy = [from = hit->path, out] { copy_output(from, out); };
        co_await executor_.pool("codec").run(copy);
        entry->cached_output = out;
        entry->cache_hit = true;
        result_hits_.fetch_add(1);
        co_return;
      }
      std::shared_ptr<JobEntry> leader;
      {
        std::lock_guard lock(mutex_);
        auto [it, inserted] = inflight_.emplace(*entry->key, entry);
        if (inserted) entry->leader = true;
        else leader = it->second;
      }
      if (!leader) co_return;  // render it
      co_await leader->ended.wait();  // then the cache has its output, or it failed and we lead
    }
  }

  static asio::awaitable<void> unless_cached(RuntimeImpl* self, std::shared_ptr<StageFn> inner, Job& job) {
    if (auto e = self->lookup(job.id()); e && e->cache_hit) co_return;
    co_await (*inner)(job);
  }

  std::vector<StageSpec> make_stages() {
    auto stages = make_wan_stages(wan_);
    RetryPolicy retry{.max_attempts = config_.retry_attempts, .base_delay = config_.retry_initial_backoff,
                      .multiplier = config_.retry_multiplier, .max_delay = config_.retry_max_backoff};
    const StageConfig* cfg[] = {&config_.preprocess, &config_.denoise, &config_.decode, &config_.encode};
    for (std::size_t i = 0; i < stages.size(); ++i) {
      auto& s = stages[i];
      s.queue_capacity = cfg[i]->queue;
      if (config_.retry_attempts > 1) s.retry = retry;
      if (faults_) s = faults_->wrap(std::move(s));
      // A job served from the result cache skips the rendering stages.
      s.fn = [this, inner = std::make_shared<StageFn>(std::move(s.fn))](Job& job) { return unless_cached(this, inner, job); };
    }
    if (config_.result_cache_entries == 0) return stages;  // no cache: nothing to look up
    StageSpec first{"lookup", JobState::queued, 4, config_.preprocess.queue,
                    [this](Job& job) { return lookup_stage(job); }};
    stages.insert(stages.begin(), std::move(first));
    return stages;
  }

  RuntimeConfig config_;
  MetricsRegistry metrics_;
  Executor executor_;
  std::unique_ptr<FaultInjector> faults_;  // before devices_/wan_: stages refer to it
  std::unique_ptr<DevicePool> devices_;
  std::shared_ptr<WanRuntime> wan_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<Journal> journal_;
  TtlCache<CachedOutput> result_cache_;
  std::atomic<std::uint64_t> result_hits_{0};
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<JobEntry>> entries_;
  std::map<ContentKey, std::shared_ptr<JobEntry>> inflight_;
  std::uint64_t next_id_ = 0;
  std::atomic<std::size_t> watchers_{0};
  std::atomic<bool> drained_{false};
  std::mutex publish_mutex_;
  CacheStats last_text_, last_results_;
};

}  // namespace detail

// ---- Runtime ----

Runtime::Runtime(RuntimeConfig config) : impl_(std::make_unique<detail::RuntimeImpl>(std::move(config))) {}
Runtime::~Runtime() = default;

JobHandle Runtime::submit(json::value spec, SubmitOptions options) { return impl_->submit(std::move(spec), std::move(options), true); }
JobHandle Runtime::try_submit(json::value spec, SubmitOptions options) { return impl_->submit(std::move(spec), std::move(options), false); }
asio::awaitable<JobHandle> Runtime::async_submit(json::value spec, SubmitOptions options) {
  return impl_->async_submit(std::move(spec), std::move(options));
}
JobSpec Runtime::validate(const json::value& spec) const { return impl_->validate(spec); }
std::optional<JobHandle> Runtime::find(const std::string& id) const { return impl_->find(id); }
bool Runtime::cancel(const std::string& id, std::string reason) { return impl_->cancel(id, std::move(reason)); }
void Runtime::drain() { impl_->drain(); }
void Runtime::shutdown() { impl_->shutdown(); }
const RuntimeConfig& Runtime::config() const { return impl_->config(); }
const ModelPackage& Runtime::package() const { return impl_->package(); }
RuntimeStats Runtime::stats() const { return impl_->stats(); }
std::string Runtime::metrics_text() const { return impl_->metrics_text(); }
asio::any_io_executor Runtime::executor() const { return impl_->executor(); }

}  // namespace vgen
