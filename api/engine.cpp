#include "api/engine.hpp"

#include "api/compute_devices.hpp"
#include "api/job_entry.hpp"

#include "api/job_recovery.hpp"
#include "api/output_reservations.hpp"
#include "api/result_cache.hpp"
#include "api/runtime_tuning.hpp"
#include "runtime/content_key.hpp"
#include "runtime/device_pool.hpp"
#include "runtime/executor.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/job_id.hpp"
#include "runtime/job_store.hpp"
#include "runtime/output_lock.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/metrics.hpp"
#include "runtime/pipeline.hpp"
#include "runtime/trace.hpp"
#include "stages/media/encode.hpp"
#include "stages/model/torch_devices.hpp"
#include "stages/exec/model_set.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <atomic>
#include <deque>
#include <map>
#include <random>

namespace vgen {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace detail {

namespace {

std::string content_type_of(const std::string& format) { return format == "png" ? "inode/directory" : content_type_for(format); }

}  // namespace

class RuntimeImpl {
 public:
  explicit RuntimeImpl(RuntimeConfig config)
      : config_(std::move(config)),
        executor_(Executor::Options{.io_threads = config_.io_threads,
                                    .spin = std::chrono::microseconds(config_.spin_us)}),
        result_cache_(config_.result_cache_entries, config_.result_cache_ttl),
        outputs_(config_.output_dir, config_.journal, config_.overwrite_outputs) {
    if (config_.model.empty()) config_.model = default_model_dir();
    for (const auto& [name, d] : default_stage_options()) config_.stages.try_emplace(name, d);  // every stage named
    std::error_code ec;
    fs::create_directories(config_.output_dir, ec);
    if (!fs::is_directory(config_.output_dir))
      throw_error(ErrorKind::invalid_argument, "output directory '" + config_.output_dir.string() + "' cannot be created" +
                                                   (ec ? " (" + ec.message() + ")" : ""));
    // The components' options go down whole; what is added here is the Runtime's own wiring.
    ModelSetOptions wo{.out_dir = config_.output_dir, .encode = config_.encoder, .text_cache = config_.text_cache,
                       .lora = config_.loras, .stages = config_.stages, .before_denoise = start_faults(),
                       .metrics = &metrics_, .tracer = &tracer_, .preview_every = config_.preview_every.value_or(0),
                       .images = config_.images, .checkpoints = checkpoint_options(), .on_checkpoint = checkpoint_hook()};
    // The models load before the device threads exist: "auto" settings are measured on them
    // (api/runtime_tuning.hpp), and the threads follow what was chosen.
    auto loaded = load_models(model_list(), wo);
    tuning_ = std::make_unique<RuntimeTuning>(config_, loaded, parse_device_list(config_.devices, discover_cuda_devices, 0.9, 1), metrics_);
    wo.on_batch_capped = [t = tuning_.get()](const std::string& key, std::size_t cap) { t->on_capped(key, cap); };
    wo.batching = config_.batching;  // max_batch as tuned
    devices_ = std::make_unique<ComputeDevices>(config_, executor_, metrics_);  // the threads as tuned
    wo.leases = devices_->leases();
    // One thread for job-store writes (each may fsync), off the io threads.
    store_pool_ = &executor_.add_pool(WorkerPool::Options{.name = "store", .threads = 1, .spin = std::chrono::microseconds(0)});
    if (!config_.trace_file.empty()) trace_start_ = tracer_.begin();
    models_ = std::make_unique<ModelSet>(std::move(loaded), executor_, devices_->pool(), wo);
    if (wo.preview_every > 0)
      for (const auto& name : models_->model_names())
        if (!models_->previews(name))
          spdlog::info("previews: off for model '{}': its package has no preview factors "
                       "(python tools/vgen_export/latent_preview.py --model DIR adds them)", name);
    if (config_.warmup) devices_->warm_up([this](const std::string& device) { models_->warm_up(device); });
    PipelineOptions po;
    po.metrics = &metrics_;
    po.tracer = &tracer_;
    po.aging = config_.priority_aging;
    po.on_event = [this](const JobEvent& e) {
      if (!e.message.empty() && !is_terminal(e.state)) spdlog::info("job {}: {}", e.job_id, e.message);  // e.g. a resume
      if (auto entry = lookup(e.job_id)) entry->emit(e);
    };
    // The lock and the job store come before any worker starts: a store that cannot be opened
    // fails the constructor with nothing running (it used to open after the workers had
    // started, which then ran on a freed pipeline).
    if (config_.exclusive_output) locks_ = lock_output_dirs(config_.output_dir, config_.journal);
    // What a crashed writer of this directory left (skipping live writers' temporaries).
    if (const auto swept = sweep_temporaries(config_.output_dir))
      spdlog::info("removed {} temporary file(s) a crashed run left in {}", swept, config_.output_dir.string());
    open_store();
    pipeline_ = std::make_unique<Pipeline>(executor_.get_executor(), make_stages(), po);
    // Running denoise groups see who waits in the denoise queue: higher priority preempts.
    models_->set_waiting_probe([p = pipeline_.get()](int priority) { return p->waiting_above("denoise", priority); });
    pipeline_->start();
    recovery_->resume_unfinished(executor_.get_executor());
  }

  // config.faults (read_environment puts $VGEN_FAULTS there): the injector, and its simulated
  // out-of-memory before each denoiser call when the plan has one.
  std::function<void(std::size_t, const std::string&, const std::string&, int)> start_faults() {
    if (!config_.faults.enabled()) return {};
    faults_ = std::make_unique<FaultInjector>(config_.faults);
    spdlog::warn("fault injection is on: {}", "see the config's \"faults\" or $VGEN_FAULTS");
    if (config_.faults.oom_rate <= 0 && config_.faults.oom_above_batch <= 0) return {};
    return [f = faults_.get()](std::size_t jobs, const std::string& device, const std::string& job, int attempt) {
      f->check_oom(jobs, device, job, attempt);
    };
  }

  // Step checkpoints need a journal (a job found after a restart is what resumes from one);
  // off (no dir) without one.
  CheckpointOptions checkpoint_options() const {
    auto k = config_.checkpoints;
    if (config_.journal.empty() || (k.every_steps == 0 && k.every_seconds == 0)) return {};
    if (k.dir.empty()) k.dir = config_.output_dir / ".vgen-checkpoints";
    k.warn = [](const std::string& m) { spdlog::warn("{}", m); };
    return k;
  }

  // On the checkpoint thread, once the file is durable: the store's reference, then the drill.
  Checkpoints::OnWritten checkpoint_hook() {
    return [this](const std::vector<CheckpointWritten>& written) {
      for (const auto& w : written) {
        try {
          store_->record_progress(w.job_id, w.step, w.total, w.file.string());
        } catch (const std::exception& e) {
          spdlog::error("job store {}: {}", store_->location(), e.what());
        }
      }
      if (faults_)
        for (const auto& w : written)
          if (auto entry = lookup(w.job_id); entry && entry->job) faults_->crash_if("checkpoint", entry->job->spec());
    };
  }

  // The default model under its directory's name, then the config's further models.
  std::vector<std::pair<std::string, fs::path>> model_list() const {
    auto name = config_.model.lexically_normal().filename().string();
    if (name.empty()) name = config_.model.lexically_normal().parent_path().filename().string();
    std::vector<std::pair<std::string, fs::path>> list{{name.empty() ? "default" : name, config_.model}};
    list.insert(list.end(), config_.models.begin(), config_.models.end());  // a name given twice is refused
    return list;
  }

  ~RuntimeImpl() { shutdown(); }

  JobHandle submit(json::value spec, SubmitOptions o, bool wait) {
    refuse_when_stopping();
    const auto parsed = models_->admit(spec);  // validate, then read and hash the job's images
    auto entry = register_entry(o, parsed);
    try {
      if (!o.resuming) journal_submitted(*entry, parsed, spec);  // a resumed job's row is there (attempts kept)
      std::shared_ptr<Job> job;
      if (wait) job = executor_.run_sync(pipeline_->submit(std::move(spec), entry->id, deadline_of(o)));
      else job = pipeline_->try_submit(std::move(spec), entry->id, deadline_of(o));
      return admitted(entry, std::move(job));
    } catch (...) {
      unregister(entry->id, !o.resuming);
      throw;
    }
  }

  // `entry`: one registered already (a resumed job, see resume_unfinished).
  asio::awaitable<JobHandle> async_submit(json::value spec, SubmitOptions o, std::shared_ptr<JobEntry> entry = nullptr) {
    refuse_when_stopping();
    const auto parsed = models_->admit(spec);  // validate, then read and hash the job's images
    if (!entry) entry = register_entry(o, parsed);
    std::shared_ptr<Job> job;
    try {
      if (!o.resuming) journal_submitted(*entry, parsed, spec);  // a resumed job's row is there (attempts kept)
      std::string id = entry->id;  // named locals, not temporaries, in the co_await (GCC 12)
      const auto deadline = deadline_of(o);
      job = co_await pipeline_->submit(std::move(spec), std::move(id), deadline);
    } catch (...) {
      unregister(entry->id, !o.resuming);
      throw;
    }
    co_return admitted(entry, std::move(job));
  }

  JobSpec validate(const json::value& spec) const { return models_->validate(spec); }

  std::string content_key(const JobSpec& spec) const { return job_content_key(models_->model_id(spec), spec).hex(); }

  // Whether the job store records `path` as the finished output of a job with this spec's key
  // (and the file is still the size it recorded).
  bool has_rendered(const JobSpec& spec, const fs::path& path) const {
    // What the store says wrote this very path, newest first: of the same key, and still the size it recorded.
    const auto rec = store_->find_output(path.string());
    if (!rec || rec->key != content_key(spec)) return false;
    std::error_code ec;
    if (fs::is_directory(path, ec)) return true;
    return fs::is_regular_file(path, ec) && fs::file_size(path, ec) == rec->output_bytes;
  }

  std::optional<JobHandle> find(const std::string& id) {
    expire_finished();
    if (auto e = lookup(id)) return JobHandle(e);
    if (auto e = recovery_->from_journal(id)) {
      std::lock_guard lock(mutex_);
      return JobHandle(entries_.emplace(id, e).first->second);
    }
    return std::nullopt;
  }

  // (wt-img: the HTTP uploads pin the images of resumed jobs through this.)
  std::vector<JobHandle> unfinished() const {
    std::vector<JobHandle> out;
    std::lock_guard lock(mutex_);
    for (const auto& [id, e] : entries_) {
      std::lock_guard entry_lock(e->mutex);
      if (!e->final_result) out.push_back(JobHandle(e));
    }
    return out;
  }

  bool cancel(const std::string& id, std::string reason) {
    if (auto e = lookup(id)) e->cancelled_by_request = true;
    return pipeline_->cancel(id, std::move(reason));
  }

  void drain() {
    if (drained_.exchange(true)) return;
    executor_.run_sync(pipeline_->drain());
    executor_.run_sync(wait_watchers());
  }

  void shutdown() {
    stopping_ = true;  // jobs cancelled from here on stay unfinished in the store: they resume
    if (!drained_.exchange(true)) {
      executor_.run_sync(pipeline_->shutdown());
      executor_.run_sync(wait_watchers());
    }
    executor_.stop();
    write_trace();
  }

  // The --trace capture, once every job has ended (a failure to write it is logged, not thrown:
  // the jobs' results stand).
  void write_trace() {
    if (!trace_start_) return;
    const auto start = *trace_start_;
    trace_start_.reset();
    try {
      tracer_.end_to_file(start, config_.trace_file);
      spdlog::info("wrote the trace timeline to {}", config_.trace_file.string());
    } catch (const std::exception& e) {
      spdlog::error("could not write the trace to {}: {}", config_.trace_file.string(), e.what());
    }
  }

  Tracer& tracer() { return tracer_; }

  RuntimeStats stats() const {
    const auto c = pipeline_->counts();
    RuntimeStats s{c.submitted, c.rejected, c.done, c.failed, c.cancelled, c.in_flight, pipeline_->queue_depth(0),
                   config_.stages.at("preprocess").queue, result_hits_.load(), models_->text_cache_stats(), result_cache_.stats()};
    return s;
  }

  std::string metrics_text() {
    {
      std::lock_guard lock(publish_mutex_);
      publish_cache_stats(metrics_, "text", models_->text_cache_stats(), last_text_);
      publish_cache_stats(metrics_, "results", result_cache_.stats(), last_results_);
      // Merged LoRA variants (issue 22): misses are merges; the bytes are what cache.loras.mb bounds.
      const auto lora = models_->lora_cache_stats();
      publish_cache_stats(metrics_, "lora", lora, last_lora_);
      metrics_.gauge("vgen_cache_bytes", "Bytes held by the cache's entries", {{"cache", "lora"}}).set(static_cast<double>(lora.cost));
    }
    return metrics_.render_prometheus();
  }

  const RuntimeConfig& config() const { return config_; }
  const ModelPackage& package() const { return models_->package(); }
  JobPage list_jobs(const JobListQuery& query) const { return store_->list(query); }
  bool previews(const std::string& model) const { return models_->previews(model); }
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

  std::shared_ptr<JobEntry> register_entry(const SubmitOptions& o, const JobSpec& spec) {
    expire_finished();
    auto entry = std::make_shared<JobEntry>();
    std::lock_guard lock(mutex_);
    entry->id = o.id.empty() ? new_job_id() : o.id;  // time-ordered and unique across processes
    if (entries_.count(entry->id) || (!o.id.empty() && !o.resuming && store_->find(o.id)))
      throw_error(ErrorKind::already_exists, "id: a job with id '" + entry->id + "' already exists");
    // Outputs may not be overwritten (the service) unless the store says this same job (same
    // content key) wrote the file; the runtime's own files are never outputs.
    entry->output = outputs_.reserve(entry->id, spec, o.resuming, [&](const fs::path& path) {
      const auto rec = store_->find_output(path.string());
      return rec && rec->key == content_key(spec);
    });
    entry->spec = spec;  // what JobHandle::result() shows before the job ends
    if (o.on_progress) entry->listeners.emplace(entry->next_listener++, o.on_progress);
    entries_.emplace(entry->id, entry);
    return entry;
  }

  // Forgets a submission that was refused after all; its store row too unless the store had
  // it before (a resumed job stays there to be resumed or failed).
  void unregister(const std::string& id, bool forget_row = true) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = entries_.find(id); it != entries_.end()) {
        outputs_.release(it->second->output, id);
        entries_.erase(it);
      }
    }
    if (forget_row) store_->forget(id);  // never acknowledged
  }

  // ---- job store ----

  void journal_submitted(const JobEntry& entry, const JobSpec& spec, const json::value& raw) {
    recovery_->record_submitted(entry.id, job_content_key(models_->model_id(spec), spec).hex(), raw.as_object());
  }

  // The configured store (api/job_recovery.hpp), with what it needs of the runtime.
  void open_store() {
    JobRecovery::Hooks hooks;
    hooks.validate = [this](const json::value& spec) { return validate(spec); };
    hooks.register_resumed = [this](const std::string& id, const JobSpec& spec) {
      SubmitOptions options;
      options.id = id;
      options.resuming = true;
      return register_entry(options, spec);
    };
    hooks.resubmit = [this](json::value spec, std::shared_ptr<JobEntry> entry) { return resubmit(std::move(spec), std::move(entry)); };
    hooks.end_entry = [this](const std::shared_ptr<JobEntry>& entry, const JobResult& r) { end_unrun(entry, r); };
    hooks.drop_checkpoint = [this](const std::string& key) { models_->drop_checkpoint(key); };
    hooks.stopping = [this] { return stopping_.load() || drained_.load(); };
    recovery_ = std::make_unique<JobRecovery>(config_, metrics_, std::move(hooks));
    store_ = &recovery_->store();
  }

  // A resumed job (registered by resume_unfinished) back into the pipeline.
  asio::awaitable<void> resubmit(json::value spec, std::shared_ptr<JobEntry> entry) {
    SubmitOptions options;  // named locals: GCC 12 mishandles class temporaries inside a co_await expression
    options.id = entry->id;
    options.resuming = true;
    co_await async_submit(std::move(spec), std::move(options), std::move(entry));
  }

  // Publishes the end of a registered job that never ran (one that could not be resumed).
  void end_unrun(const std::shared_ptr<JobEntry>& entry, const JobResult& r) {
    release_output(*entry);
    {
      std::lock_guard lock(entry->mutex);
      entry->final_result = r;
      entry->ended_at = std::chrono::steady_clock::now();
    }
    {
      std::lock_guard lock(mutex_);
      finished_order_.emplace_back(entry->ended_at, entry->id);
    }
    entry->promise.set_value(r);
    entry->ended.set();
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
    co_await finalize(*entry, *job);
    job->payload.reset();  // the result is copied out: free the job's tensors (frames, latents) now
    if (watchers_.fetch_sub(1) == 1 && waiting_watchers_.load()) no_watchers_.set();
  }

  // Every watcher has published its job's result (they run right after the jobs end). Called
  // once intake has stopped, so no new watcher starts; the last one to end wakes this.
  asio::awaitable<void> wait_watchers() {
    waiting_watchers_ = true;
    if (watchers_.load() == 0) co_return;
    co_await no_watchers_.wait();
  }

  asio::awaitable<void> finalize(JobEntry& entry, const Job& job) {
    JobResult r = result_of(entry, job);
    release_output(entry);
    if (r.state == JobState::done && !r.cache_hit && entry.key) result_cache_.put(*entry.key, r.output);
    if (entry.leader) result_cache_.release(*entry.key, &entry);
    {
      std::lock_guard lock(entry.mutex);
      entry.final_result = r;
      entry.ended_at = std::chrono::steady_clock::now();
    }
    {
      std::lock_guard lock(mutex_);
      finished_order_.emplace_back(entry.ended_at, entry.id);
    }
    // Before the result is visible (a client that saw it, the store has it), on the store's own
    // thread: an fsync must not stall the io threads that serve HTTP and drive every job.
    auto record = [this, &entry, &r] {
      recovery_->record_finished(entry, r, stopping_);
      return 0;
    };
    co_await store_pool_->run(record);
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
    r.resumed_from_step = s.resumed_from;
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
        const auto w = models_->result(job);
        r.output = w.output;
        r.device = w.device;
        r.text_cache_hit = w.text_cache_hit;
        r.spec = w.spec;
      }
    }
    return r;
  }

 private:
  // Forgets finished jobs older than job_ttl, oldest first: O(expired), called on every
  // submission and lookup (a long batch keeps no finished job beyond job_ttl).
  void expire_finished() {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    while (!finished_order_.empty() && now - finished_order_.front().first > config_.job_ttl) {
      const auto id = std::move(finished_order_.front().second);
      finished_order_.pop_front();
      if (auto it = entries_.find(id); it != entries_.end()) {
        std::lock_guard l(it->second->mutex);
        if (it->second->final_result && now - it->second->ended_at > config_.job_ttl) entries_.erase(it);
      }
    }
  }

  void refuse_when_stopping() const {
    if (drained_.load()) throw_error(ErrorKind::overloaded, "the runtime is stopping: it takes no new jobs");
  }

  void release_output(const JobEntry& entry) { outputs_.release(entry.output, entry.id); }

  // The first stage: serve the job from the result cache or from an identical job in flight.
  asio::awaitable<void> lookup_stage(Job& job) {
    auto entry = lookup(job.id());
    if (!entry || !result_cache_.enabled()) co_return;
    const auto spec = validate(job.spec());
    entry->key = job_content_key(models_->model_id(spec), spec);
    const auto out = outputs_.path_for(spec, job.id());
    for (;;) {
      if (auto hit = result_cache_.get(*entry->key)) {
        auto copy = [from = hit->path, out] { copy_atomically(from, out); };
        co_await executor_.pool("codec").run(copy);
        entry->cached_output = out;
        entry->cache_hit = true;
        result_hits_.fetch_add(1);
        co_return;
      }
      auto leader = result_cache_.lead(*entry->key, entry);
      if (!leader) {
        entry->leader = true;
        co_return;  // render it
      }
      co_await leader->ended.wait();  // then the cache has its output, or it failed and we lead
    }
  }

  // A job served from the result cache skips the rendering stages; the first of them claims
  // the job in the store (status running, one more attempt) before its compute starts.
  static asio::awaitable<void> unless_cached(RuntimeImpl* self, std::shared_ptr<StageFn> inner, bool claims, Job& job) {
    if (auto e = self->lookup(job.id()); e && e->cache_hit) co_return;
    if (claims && job.snapshot().attempts == 0) {
      auto claim = [self, id = job.id()] { return self->store_->claim(id); };  // on the store's thread (fsync)
      co_await self->store_pool_->run(claim);
    }
    co_await (*inner)(job);
  }

  std::vector<StageSpec> make_stages() {
    auto stages = models_->stages();
    RetryPolicy retry{.max_attempts = config_.retry_attempts, .base_delay = config_.retry_initial_backoff,
                      .multiplier = config_.retry_multiplier, .max_delay = config_.retry_max_backoff};
    for (std::size_t i = 0; i < stages.size(); ++i) {  // workers and queues: config_.stages, set by the model set
      auto& s = stages[i];
      if (config_.retry_attempts > 1) s.retry = retry;
      if (faults_) s = faults_->wrap(std::move(s));
      // A job served from the result cache skips the rendering stages.
      s.fn = [this, inner = std::make_shared<StageFn>(std::move(s.fn)), claims = i == 0](Job& job) {
        return unless_cached(this, inner, claims, job);
      };
    }
    if (config_.result_cache_entries == 0) return stages;  // no cache: nothing to look up
    StageSpec first{"lookup", JobState::queued, 4, config_.stages.at("preprocess").queue,
                    [this](Job& job) { return lookup_stage(job); }};
    stages.insert(stages.begin(), std::move(first));
    return stages;
  }

  RuntimeConfig config_;
  MetricsRegistry metrics_;
  Tracer tracer_;  // before everything that records into it
  std::optional<Tracer::clock::time_point> trace_start_;  // config.trace_file's capture
  Executor executor_;
  std::unique_ptr<FaultInjector> faults_;  // before devices_/models_: stages refer to it
  std::unique_ptr<RuntimeTuning> tuning_;  // before models_: its Batcher reports caps to it
  std::unique_ptr<ComputeDevices> devices_;
  std::unique_ptr<ModelSet> models_;
  std::unique_ptr<Pipeline> pipeline_;
  std::vector<OutputLock> locks_;  // held for the Runtime's life (config.exclusive_output)
  std::unique_ptr<JobRecovery> recovery_;  // owns the job store
  JobStore* store_ = nullptr;              // recovery_'s
  WorkerPool* store_pool_ = nullptr;  // owned by executor_
  ResultCache result_cache_;
  OutputReservations outputs_;
  std::atomic<std::uint64_t> result_hits_{0};
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<JobEntry>> entries_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> finished_order_;  // under mutex_
  std::atomic<std::size_t> watchers_{0};
  std::atomic<bool> waiting_watchers_{false}, stopping_{false};
  AsyncEvent no_watchers_;
  std::atomic<bool> drained_{false};
  std::mutex publish_mutex_;
  CacheStats last_text_, last_results_, last_lora_;
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
std::string Runtime::content_key(const JobSpec& spec) const { return impl_->content_key(spec); }
bool Runtime::has_rendered(const JobSpec& spec, const fs::path& path) const { return impl_->has_rendered(spec, path); }
std::optional<JobHandle> Runtime::find(const std::string& id) const { return impl_->find(id); }
std::vector<JobHandle> Runtime::unfinished() const { return impl_->unfinished(); }
bool Runtime::cancel(const std::string& id, std::string reason) { return impl_->cancel(id, std::move(reason)); }
void Runtime::drain() { impl_->drain(); }
void Runtime::shutdown() { impl_->shutdown(); }
const RuntimeConfig& Runtime::config() const { return impl_->config(); }
const ModelPackage& Runtime::package() const { return impl_->package(); }
RuntimeStats Runtime::stats() const { return impl_->stats(); }
JobPage Runtime::list_jobs(const JobListQuery& query) const { return impl_->list_jobs(query); }
bool Runtime::previews(const std::string& model) const { return impl_->previews(model); }
std::string Runtime::metrics_text() const { return impl_->metrics_text(); }
asio::any_io_executor Runtime::executor() const { return impl_->executor(); }
Tracer& Runtime::tracer() const { return impl_->tracer(); }

}  // namespace vgen
