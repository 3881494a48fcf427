// Cross-job batching for the preprocess, denoise and decode stages (internal to the Wan
// stages; includes LibTorch). Jobs that can share a model call join one group:
//  - preprocess: any jobs of the package; one text-encoder call for the group's uncached
//    prompts (each distinct text once), then each job's own noise (prepare_jobs);
//  - denoise: interchangeable denoising loops (same latent shape, steps, scheduler, package,
//    guidance on/off; prompts of any length: the group brings text rows to one count,
//    stages/text_context.hpp); one transformer call per step for all jobs (each job's cond and
//    uncond rows together), each job's own guidance scale, then one scheduler step for the
//    group's latents as a batch (steps are row-wise);
//  - decode: same latent shape; one VAE call.
// A group collects until it holds max_batch jobs or `wait` has passed since its first job,
// then asks for the device and keeps collecting until the device is granted: under load the
// group grows while earlier work runs, on an idle device it starts at once. max_batch 1 runs
// each job alone at once.
//
// Each job's result equals its result alone up to the models' batch numerics (tested ≤ 1e-4);
// with one job per group it is the same computation as before batching existed.
//
// Ownership and cancellation: a group runs in its own coroutine on the runtime's executor,
// not in any job's stage, so cancelling one job (its stage stops waiting) never stops the
// others; the group drops a cancelled job between steps. Results are written back only when
// the group's work completes, so a failed group leaves its jobs as they were (a retry starts
// clean). Out of memory: a group that fails with Error(out_of_memory) fails its jobs (the
// stage's retry policy retries them) and halves the batch size for jobs of its kind, down to one.
// Thread-safety: join() may be called from any thread.
#pragma once

#include "stages/wan_job.hpp"

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>

namespace vgen {

enum class BatchKind { preprocess, denoise, decode };
std::string_view to_string(BatchKind kind);

class JobBatcher {
 public:
  // `metrics` (optional, must outlive the batcher): a histogram vgen_batch_size{stage} of group sizes.
  JobBatcher(std::size_t max_batch, std::chrono::milliseconds wait, MetricsRegistry* metrics = nullptr)
      : max_batch_(max_batch < 1 ? 1 : max_batch), wait_(wait), metrics_(metrics) {}

  // Denoises `job` (its WanJob payload) in some group; returns when its latents are final.
  // Throws the group's error, or Error(cancelled) for a cancelled job.
  boost::asio::awaitable<void> join(WanRuntime& rt, Job& job, BatchKind kind = BatchKind::denoise);

  std::size_t max_batch() const noexcept { return max_batch_; }
  // How many groups ran with each size (observability and tests).
  std::map<std::size_t, std::uint64_t> group_sizes(BatchKind kind = BatchKind::denoise) const;

  struct Member;
  struct Group;

 private:
  boost::asio::awaitable<void> run_group(WanRuntime& rt, std::shared_ptr<Group> group);
  boost::asio::awaitable<void> run_loop(WanRuntime& rt, Group& group, const Placement& placement);
  boost::asio::awaitable<void> run_decode(WanRuntime& rt, Group& group, const Placement& placement);
  boost::asio::awaitable<void> run_preprocess(WanRuntime& rt, Group& group, const Placement& placement);
  void close(Group& group);  // no more joins
  bool is_closed(const Group& group) const;
  const std::size_t max_batch_;
  const std::chrono::milliseconds wait_;
  MetricsRegistry* const metrics_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Group>> open_;  // collecting groups by compatibility key
  std::map<std::pair<BatchKind, std::size_t>, std::uint64_t> sizes_;
  std::map<std::string, std::size_t> caps_;  // batch size limits learnt from out-of-memory errors
};

}  // namespace vgen
