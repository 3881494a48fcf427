// Test support: a model family of a few lines over a pure function, for the batcher and
// Runtime tests (no model files are run).
//   prepare  noise [1, 2, F', 4, 4] from the job's seed (latent grid of the package's scales)
//   predict  x * gain + t / 1000, row-wise (gain from the family name: fake-a 0.5, else 0.25)
//   decode   frames [F, H, W, 3]: each latent's sigmoid, nearest-upsampled to the job's size
// Every call is counted with its row count; hooks let a test cancel a job mid-group or
// simulate out of memory. Thread-safety: counters under a mutex; hooks are set before use.
#pragma once

#include "stages/families/family.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <mutex>

namespace vgen::test {

class FakeFamily final : public Family {
 public:
  FakeFamily(ModelPackage package, std::string name) : package_(std::move(package)) {
    package_.family = std::move(name);
    gain_ = package_.family == "fake-a" ? 0.5 : 0.25;
  }

  const ModelPackage& package() const override { return package_; }
  JobSpec validate(const boost::json::value& spec) const override {
    return parse_job_spec(spec, package_.defaults, package_.limits);
  }
  std::shared_ptr<FamilyJob> create_job(JobSpec spec) const override {
    if (on_create_job) on_create_job(spec);
    auto j = std::make_shared<FamilyJob>();
    j->spec = std::move(spec);
    return j;
  }
  void prepare(const std::string&, const std::vector<FamilyJob*>& jobs) override {
    for (auto* j : jobs) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(j->spec.seed);
      j->state.step = 0;
      j->state.latents = at::randn({1, 2, (j->spec.frames - 1) / 4 + 1, 4, 4}, gen, at::TensorOptions().dtype(at::kFloat));
    }
  }
  std::unique_ptr<Scheduler> make_scheduler(const FamilyJob& job) const override {
    auto s = vgen::make_scheduler(scheduler_name, scheduler_params);
    s->set_timesteps(job.spec.steps);
    return s;
  }
  std::string denoise_key(const FamilyJob& job, const Scheduler& s) const override {
    std::string k = key_prefix() + "|" + std::string(s.name()) + "|" + std::to_string(job.spec.steps);
    for (auto d : job.state.latents.sizes()) k += "|" + std::to_string(d);
    return k;
  }
  at::Tensor predict(const PredictCall& call) override {
    std::size_t n = 0;
    {
      std::lock_guard lock(mutex_);
      n = ++calls_;
      rows_.push_back(call.jobs.size());
      for (auto* j : call.jobs) {
        ++predicted_[j->spec.name];
        if (j->spec.model != expect_model) ++foreign_rows_;
      }
    }
    if (on_predict) on_predict(n, call.jobs.size());
    if (!oom_device.empty() && call.device == oom_device)
      throw_error(ErrorKind::out_of_memory, "fake family: out of memory on " + call.device);
    if (oom_above_rows && call.jobs.size() > oom_above_rows && call.jobs.front()->state.step >= oom_from_step)
      throw_error(ErrorKind::out_of_memory, "fake family: out of memory at " + std::to_string(call.jobs.size()) + " rows");
    // Each row its own timestep ([jobs]; a 0-dim one applies to all).
    const auto t = call.timestep.to(at::kFloat).reshape({-1, 1, 1, 1, 1});
    return call.x * gain_ + t / 1000.0;
  }
  void decode(const std::string&, const std::vector<FamilyJob*>& jobs) override {
    for (auto* j : jobs) {
      // [1, 2, F', 4, 4] -> [F, H, W, 3]: channel mean, each latent frame repeated, upsampled.
      auto z = at::sigmoid(j->state.latents.mean(1));  // [1, F', 4, 4]
      const int f = j->spec.frames, h = j->spec.height, w = j->spec.width;
      auto idx_f = at::div(at::arange(f, at::kLong), 4, "floor").clamp_max(z.size(1) - 1);
      auto idx_h = at::div(at::arange(h, at::kLong) * 4, h, "floor");
      auto idx_w = at::div(at::arange(w, at::kLong) * 4, w, "floor");
      auto v = z[0].index_select(0, idx_f).index_select(1, idx_h).index_select(2, idx_w);  // [F, H, W]
      j->frames = v.unsqueeze(-1).expand({f, h, w, 3}).contiguous();
    }
  }
  void warm_up(const std::string&) override { ++warm_ups; }

  // The largest row count among calls after the n-th (1-based; 0: all calls).
  std::size_t max_rows_after(std::size_t n) const {
    std::lock_guard lock(mutex_);
    std::size_t most = 0;
    for (std::size_t i = n; i < rows_.size(); ++i) most = std::max(most, rows_[i]);
    return most;
  }

  // How many denoiser calls carried the job named `name`.
  int predicted(const std::string& name) const {
    std::lock_guard lock(mutex_);
    const auto it = predicted_.find(name);
    return it == predicted_.end() ? 0 : it->second;
  }
  // Rows of jobs whose spec.model is not expect_model (jobs of another model in our calls).
  std::size_t foreign_rows() const {
    std::lock_guard lock(mutex_);
    return foreign_rows_;
  }

  std::function<void(std::size_t call, std::size_t rows)> on_predict;
  std::string scheduler_name = "FlowMatchEulerDiscreteScheduler";  // set before jobs run
  SchedulerParams scheduler_params;
  std::function<void(const JobSpec&)> on_create_job;  // e.g. an image-to-video test decoding spec.image
  std::string expect_model;  // the "model" field this family's jobs carry
  std::size_t oom_above_rows = 0;  // 0: never
  int oom_from_step = 0;
  std::string oom_device;  // every call on this device runs out of memory
  std::atomic<int> warm_ups{0};

 private:
  ModelPackage package_;
  double gain_ = 0.5;
  mutable std::mutex mutex_;
  std::size_t calls_ = 0;
  std::vector<std::size_t> rows_;
  std::map<std::string, int> predicted_;
  std::size_t foreign_rows_ = 0;
};

// A package of no files for the batcher tests (its id is its name).
inline ModelPackage fake_package(const std::string& name) {
  ModelPackage p;
  p.family = name;
  p.components["transformer"].sha256 = "fake-" + name;
  p.defaults.width = 32;
  p.defaults.height = 32;
  p.defaults.frames = 5;
  p.defaults.steps = 4;
  p.defaults.guidance = 1.0;
  return p;
}

inline std::shared_ptr<Family> make_fake_family(const std::string& name) {
  return std::make_shared<FakeFamily>(fake_package(name), name);
}

inline FakeFamily& fake(Family& f) { return static_cast<FakeFamily&>(f); }

}  // namespace vgen::test
