#include "api/engine.hpp"

#include "api/compute_devices.hpp"
#include "api/job_entries.hpp"

#include "api/job_recovery.hpp"
#include "api/job_results.hpp"
#include "api/model_usage_metrics.hpp"
#include "api/output_reservations.hpp"
#include "api/result_cache.hpp"
#include "api/result_lookup.hpp"
#include "api/runtime_tuning.hpp"
#include "api/webhooks.hpp"
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
#include "stages/model/model_backend_options.hpp"
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
#include <map>
#include <mutex>
#include <random>

namespace vgen {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace detail {

class RuntimeImpl {
 public:
  explicit RuntimeImpl(RuntimeConfig config)
      : config_(std::move(config)),
        executor_(Executor::Options{.io_threads = config_.io_threads,
                                    .spin = std::chrono::microseconds(config_.spin_us)}),
        result_cache_(config_.result_cache_entries, config_.result_cache_ttl),
        outputs_(config_.output_dir, config_.journal, config_.overwrite_outputs),
        entries_(config_.job_ttl) {
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
                       .images = config_.images, .videos = config_.videos, .checkpoints = checkpoint_options(), .on_checkpoint = checkpoint_hook(),
                       .post = config_.post, .post_threads = config_.post_threads,
                       .base_frames = config_.result_cache_entries > 0 ? config_.base_frames : BaseFramesOptions{},
                       .live = &live_};
    // The models load before the device threads exist: "auto" settings are measured on them
    // (api/runtime_tuning.hpp), and the threads follow what was chosen.
    const auto device_list = parse_device_list(config_.devices, discover_cuda_devices, 0.9, 1, config_.threads_per_gpu);
    const bool gpu = std::any_of(device_list.begin(), device_list.end(), [](const DeviceSpec& d) { return d.kind == DeviceKind::cuda; });
    // Before any module runs (the tuner's probe included): TorchScript's CUDA fusion (an
    // optimised plan, once made, keeps its kernels), and a GPU decodes one clip per call unless
    // configured (stages/exec/batching_options.hpp says why); the probe decodes as the jobs will.
    // Every TorchScript call reads the options (model_backend_options.hpp); a pair set in code
    // rather than read from a file is checked here as a file's is.
    check_model_backend_options(config_.model_backend);
    set_model_backend_options(config_.model_backend);
    set_attention_priority(config_.model_backend.attention);  // CUDA calls' kernel order (CPU ones ignore it)
    if (gpu) set_torchscript_gpu_fusion(config_.model_backend.torchscript_gpu_fusion.value_or(false));
    // Read by the families' denoiser calls (stages/model/cuda_graph_calls.hpp's with_cuda_graphs).
    if (config_.model_backend.cuda_graphs)
      spdlog::info("model_backend.cuda_graphs: denoiser calls on CUDA devices replay captured graphs{}",
                   gpu ? "" : " (no CUDA device here: nothing is graphed)");
    if (gpu && config_.batching.max_decode_batch == RuntimeConfig::kAuto) config_.batching.max_decode_batch = 1;
    auto loaded = load_models(model_list(), wo);
    tuning_ = std::make_unique<RuntimeTuning>(config_, loaded, device_list, metrics_);
    wo.on_batch_capped = [t = tuning_.get()](const std::string& key, std::size_t cap) { t->on_capped(key, cap); };
    wo.batching = config_.batching;  // max_batch as tuned
    wo.max_batch_limit = tuning_->batch_limit();  // what the search going on between jobs may switch to
    wo.on_model_call = [t = tuning_.get()](BatchKind kind, const std::string& key, std::size_t jobs, double seconds) {
      t->observe(kind, key, jobs, seconds);  // the tuner learns from running jobs
    };
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
    // Once the in-flight count has dropped (not at the terminal event, which comes first): the
    // tuner's search may find the device free.
    po.after_job_end = [this] { tuning_->jobs_changed(); };
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
    webhooks_ = start_webhooks();  // before any job can end (resumed ones included)
    po.before_first_stage = lookup_hook();
    results_ = std::make_unique<JobResults>(JobResults::Parts{*models_, entries_, outputs_, *recovery_, *store_pool_, lookup_.get(),
                                                              stopping_, webhooks_.get(), faults_.get(), &live_});
    pipeline_ = std::make_unique<Pipeline>(executor_.get_executor(), make_stages(), po);
    models_->preempt_for(*pipeline_);  // running groups see who waits for them: higher priority preempts
    pipeline_->start();
    recovery_->resume_unfinished(executor_.get_executor());
    // The self-tuner's search, when start-up left some, goes on while no job runs
    // (api/runtime_tuning.hpp); the batch it finds applies to groups formed after it ends.
    tuning_->continue_between_jobs(devices_->pool(), [this] { return pipeline_->counts().in_flight == 0; },
                                   [this](std::size_t batch) { models_->set_max_batch(batch); });
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

  // The configured webhook endpoints' sender; its outbox is a table in the SQLite journal's
  // file when there is one (one file to keep, under the same lock), else a file of its own.
  std::unique_ptr<Webhooks> start_webhooks() {
    if (config_.webhooks.endpoints.empty()) return nullptr;
    auto file = config_.webhooks.outbox;
    if (file.empty())
      file = !config_.journal.empty() && config_.job_store == "sqlite" ? config_.journal : config_.output_dir / ".vgen-webhooks.db";
    auto webhooks = std::make_unique<Webhooks>(config_.webhooks, file, metrics_);
    spdlog::info("webhooks: {} endpoint(s), deliveries recorded in {}", config_.webhooks.endpoints.size(), file.string());
    return webhooks;
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
  JobSpec admit(json::value& spec) const { return models_->admit(spec); }

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

  // The job's live stream, opened for a reader; nullptr once the job has ended. The end is
  // checked after opening: JobResults closes a job's stream after the job is finished, so a
  // stream opened before that is closed by it and one opened after it is dropped here.
  std::shared_ptr<LiveBroadcast> live_stream(const std::string& id) {
    const auto entry = lookup(id);
    if (!entry || JobHandle(entry).finished()) return nullptr;
    auto stream = live_.open(id);
    if (JobHandle(entry).finished()) {
      live_.close(id);
      return nullptr;
    }
    return stream;
  }

  std::optional<JobHandle> find(const std::string& id) {
    entries_.expire();
    if (auto e = lookup(id)) return JobHandle(e);
    if (auto e = recovery_->from_journal(id)) return JobHandle(entries_.adopt(std::move(e)));
    return std::nullopt;
  }

  // (wt-img: the HTTP uploads pin the images of resumed jobs through this.)
  std::vector<JobHandle> unfinished() const {
    std::vector<JobHandle> out;
    for (auto& e : entries_.unfinished()) out.push_back(JobHandle(std::move(e)));
    return out;
  }

  bool cancel(const std::string& id, std::string reason) {
    if (auto e = lookup(id)) e->cancelled_by_request = true;
    return pipeline_->cancel(id, std::move(reason));
  }

  void drain() {
    if (drained_.exchange(true)) return;
    executor_.run_sync(pipeline_->drain());
    executor_.run_sync(results_->wait_all());
  }

  void shutdown() {
    tuning_->stop();   // no measurement starts now; one under way is waited for
    stopping_ = true;  // jobs cancelled from here on stay unfinished in the store: they resume
    if (!drained_.exchange(true)) {
      executor_.run_sync(pipeline_->shutdown());
      executor_.run_sync(results_->wait_all());
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
                   config_.stages.at("preprocess").queue, lookup_ ? lookup_->hits() : 0, models_->text_cache_stats(), result_cache_.stats()};
    return s;
  }

  std::string metrics_text() {
    {
      std::lock_guard lock(publish_mutex_);
      publish_cache_stats(metrics_, "text", models_->text_cache_stats(), last_text_);
      publish_cache_stats(metrics_, "results", result_cache_.stats(), last_results_);
      const auto base = models_->base_frames_stats();
      publish_cache_stats(metrics_, "base_frames", base, last_base_frames_);
      metrics_.gauge("vgen_cache_bytes", "Bytes held by the cache's entries", {{"cache", "base_frames"}}).set(static_cast<double>(base.cost));
      // Merged LoRA variants (issue 22): misses are merges; the bytes are what cache.loras.mb bounds.
      const auto lora = models_->lora_cache_stats();
      publish_cache_stats(metrics_, "lora", lora, last_lora_);
      metrics_.gauge("vgen_cache_bytes", "Bytes held by the cache's entries", {{"cache", "lora"}}).set(static_cast<double>(lora.cost));
      std::vector<ServedPackage> served;
      for (const auto& name : models_->model_names()) served.push_back({name, models_->package(name).dir});
      usage_metrics_.publish(served, current_model_usage());
    }
    return metrics_.render_prometheus();
  }

  const RuntimeConfig& config() const { return config_; }
  const ModelPackage& package() const { return models_->package(); }
  JobPage list_jobs(const JobListQuery& query) const { return store_->list(query); }
  bool previews(const std::string& model) const { return models_->previews(model); }
  std::vector<ServedModel> served_models() const {
    std::vector<ServedModel> out;
    for (const auto& name : models_->model_names()) {
      const auto& package = models_->package(name);
      out.push_back({name, package.defaults, package.limits});
    }
    return out;
  }
  asio::any_io_executor executor() { return executor_.get_executor(); }

 private:
  std::shared_ptr<JobEntry> lookup(const std::string& id) const { return entries_.find(id); }

  std::optional<Job::clock::time_point> deadline_of(const SubmitOptions& o) const {
    if (!o.deadline) return std::nullopt;
    return Job::clock::now() + *o.deadline;
  }

  std::shared_ptr<JobEntry> register_entry(const SubmitOptions& o, const JobSpec& spec) {
    return entries_.add(o.id.empty() ? new_job_id() : o.id, [&](JobEntry& entry) {  // time-ordered, unique across processes
      if (!o.id.empty() && !o.resuming && store_->find(o.id))
        throw_error(ErrorKind::already_exists, "id: a job with id '" + entry.id + "' already exists");
      // Outputs may not be overwritten (the service) unless the store says this same job (same
      // content key) wrote the file; the runtime's own files are never outputs.
      entry.output = outputs_.reserve(entry.id, spec, o.resuming, [&](const fs::path& path) {
        const auto rec = store_->find_output(path.string());
        return rec && rec->key == content_key(spec);
      });
      entry.spec = spec;  // what JobHandle::result() shows before the job ends
      if (o.on_progress) entry.listeners.emplace(entry.next_listener++, o.on_progress);
    });
  }

  // Forgets a submission that was refused after all; its store row too unless the store had
  // it before (a resumed job stays there to be resumed or failed).
  void unregister(const std::string& id, bool forget_row = true) {
    if (auto entry = entries_.remove(id)) outputs_.release(entry->output, id);
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
    hooks.end_entry = [this](const std::shared_ptr<JobEntry>& entry, const JobResult& r) { results_->end_unrun(*entry, r); };
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

  JobHandle admitted(const std::shared_ptr<JobEntry>& entry, std::shared_ptr<Job> job) {
    results_->watch(entry, std::move(job), executor_.get_executor());
    return JobHandle(entry);
  }

 private:
  void refuse_when_stopping() const {
    if (drained_.load()) throw_error(ErrorKind::overloaded, "the runtime is stopping: it takes no new jobs");
  }

  // The result cache as the pipeline's first hook (api/result_lookup.hpp); none without a cache.
  std::optional<PipelineHook> lookup_hook() {
    if (config_.result_cache_entries == 0) return std::nullopt;
    ResultLookup::Context context;
    context.entry = [this](const std::string& id) { return lookup(id); };
    context.key = [this](const Job& job) {
      const auto spec = validate(job.spec());
      return job_content_key(models_->model_id(spec), spec);
    };
    context.output = [this](const Job& job) { return outputs_.path_for(validate(job.spec()), job.id()); };
    lookup_ = std::make_unique<ResultLookup>(result_cache_, executor_.pool("codec"), std::move(context));
    return lookup_->hook(4, config_.stages.at("preprocess").queue);
  }

  // The first stage claims the job in the store (status running, one more attempt) before its
  // compute starts, once: a retry of the stage does not claim again.
  asio::awaitable<void> claim(Job& job) {
    auto claim = [this, id = job.id()] { return store_->claim(id); };  // on the store's thread (fsync)
    co_await store_pool_->run(claim);
  }

  std::vector<StageSpec> make_stages() {
    auto stages = models_->stages();
    RetryPolicy retry{.max_attempts = config_.retry_attempts, .base_delay = config_.retry_initial_backoff,
                      .multiplier = config_.retry_multiplier, .max_delay = config_.retry_max_backoff};
    for (std::size_t i = 0; i < stages.size(); ++i) {  // workers and queues: config_.stages, set by the model set
      auto& s = stages[i];
      if (config_.retry_attempts > 1) s.retry = retry;
      if (faults_) s = faults_->wrap(std::move(s));
    }
    stages.front().before = [this](Job& job) { return claim(job); };
    return stages;
  }

  RuntimeConfig config_;
  MetricsRegistry metrics_;
  Tracer tracer_;  // before everything that records into it
  std::optional<Tracer::clock::time_point> trace_start_;  // config.trace_file's capture
  Executor executor_;
  std::unique_ptr<FaultInjector> faults_;  // before devices_/models_: stages refer to it
  LiveStreams live_{LiveBroadcast::default_max_bytes, config_.live_max_total_bytes};  // before models_: the encode stage writes to it
  std::unique_ptr<RuntimeTuning> tuning_;  // before models_: its Batcher reports caps to it
  ModelUsageMetrics usage_metrics_{metrics_};  // after metrics_: it publishes into it
  std::unique_ptr<ComputeDevices> devices_;
  std::unique_ptr<ModelSet> models_;
  std::unique_ptr<Pipeline> pipeline_;
  std::vector<OutputLock> locks_;  // held for the Runtime's life (config.exclusive_output)
  std::unique_ptr<JobRecovery> recovery_;  // owns the job store
  JobStore* store_ = nullptr;              // recovery_'s
  WorkerPool* store_pool_ = nullptr;  // owned by executor_
  ResultCache result_cache_;
  OutputReservations outputs_;
  std::unique_ptr<ResultLookup> lookup_;  // with a result cache: the first hook
  JobEntries entries_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Webhooks> webhooks_;    // nullptr: no endpoints configured
  std::unique_ptr<JobResults> results_;  // refers to the parts above
  std::atomic<bool> drained_{false};
  std::mutex publish_mutex_;
  CacheStats last_text_, last_results_, last_lora_, last_base_frames_;
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
JobSpec Runtime::admit(json::value& spec) const { return impl_->admit(spec); }
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
std::shared_ptr<LiveBroadcast> Runtime::live_stream(const std::string& id) const { return impl_->live_stream(id); }
std::vector<ServedModel> Runtime::served_models() const { return impl_->served_models(); }
std::string Runtime::metrics_text() const { return impl_->metrics_text(); }
asio::any_io_executor Runtime::executor() const { return impl_->executor(); }
Tracer& Runtime::tracer() const { return impl_->tracer(); }

}  // namespace vgen
