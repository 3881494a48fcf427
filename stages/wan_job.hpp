// Internals of the Wan stages that involve tensors: the runtime's state and a job's payload.
// Included by stages/wan_pipeline.cpp and by tests; never include spdlog/fmt next to it.
#pragma once

#include "runtime/device_pool.hpp"
#include "stages/model_backend.hpp"
#include "stages/scheduler.hpp"
#include "stages/tokenizer.hpp"
#include "stages/wan_pipeline.hpp"

#include <ATen/core/Tensor.h>

#include <functional>

namespace vgen {

class JobBatcher;

struct WanRuntime {
  ModelPackage package;
  std::shared_ptr<const Tokenizer> tokenizer;
  Executor* executor = nullptr;
  DevicePool* devices = nullptr;
  WanRuntimeOptions options;
  std::shared_ptr<TtlCache<at::Tensor>> text_cache;
  std::shared_ptr<JobBatcher> batcher;
};

// A Wan job's state between stages. Job::payload holds a std::shared_ptr<WanJob>: batch
// groups share it, so a job that ends (cancelled, its payload dropped) while its group still
// computes frees nothing the group is using.
struct WanJob {
  JobSpec spec;
  at::Tensor embeds;   // [1 or 2, L, D]: cond (and uncond when guidance > 1), zero past each text
  std::vector<std::int64_t> embed_lengths;  // per row of embeds: its text's rows (stages/text_context.hpp)
  at::Tensor latents;  // [1, C, F', H', W'] float32, on the CPU between stages
  at::Tensor frames;   // [F, H, W, 3] float32 in [0, 1]
  std::filesystem::path output;
  bool text_cache_hit = false;
  std::string device;  // the device the last stage ran on
  // Optional observer (tests, tools), called on the compute thread after each step.
  std::function<void(int step, const at::Tensor& latents)> on_step;
};

WanJob& wan_job(Job& job);                      // Error(internal) if the job has no Wan payload
std::shared_ptr<WanJob> shared_wan_job(Job& job);  // the same, shared
const WanJob* find_wan_job(const Job& job);     // nullptr if none

// Preprocess compute for a group of jobs on `device` (compute thread): text embeddings (the
// uncached prompts of all jobs in one text-encoder call, each distinct text once, through the
// TTL cache) and each job's initial noise from its own seed.
void prepare_jobs(WanRuntime& rt, const std::string& device, const std::vector<WanJob*>& jobs);

// One transformer call on `device`: forward on the zero-padded max_length context (bias
// undefined), or forward_compact with the compact form's key bias (stages/text_context.hpp).
// x is cast to the transformer's dtype, t is float32; returns the flow prediction on the device.
at::Tensor predict_flow(WanRuntime& rt, const std::string& device, const at::Tensor& x, const at::Tensor& t,
                        const at::Tensor& context, const at::Tensor& bias);

// Where a stage's compute runs: a lease from the DevicePool and that device's worker pool.
struct Placement {
  DeviceLease lease;
  WorkerPool* pool = nullptr;
  std::string device;
};
boost::asio::awaitable<Placement> place(WanRuntime& rt);

// A package component loaded (once per device, ModuleCache) for `device`.
std::shared_ptr<const Module> wan_module(WanRuntime& rt, const std::string& component, const std::string& device);

// The scheduler a job uses: the package's, or `override_type` configured from the package's
// flow shift and training steps.
std::unique_ptr<Scheduler> make_job_scheduler(const ModelPackage& package, const std::string& override_type);

}  // namespace vgen
