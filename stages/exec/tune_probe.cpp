#include "stages/exec/tune_probe.hpp"

#include "runtime/errors.hpp"
#include "stages/families/family.hpp"
#include "stages/media/image_input.hpp"
#include "stages/model/component_backends.hpp"
#include "stages/model/torch_devices.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <atomic>
#include <barrier>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

namespace vgen {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

// One lease's group at one batch size, ready for denoiser calls: prepared, the scheduler set,
// the first step's model input stacked.
struct Prepared {
  std::vector<std::shared_ptr<FamilyJob>> jobs;
  std::vector<FamilyJob*> work;
  std::unique_ptr<Scheduler> scheduler;
  at::Tensor x, t;
};

std::string model_field(const json::value& spec) {
  if (const auto* o = spec.if_object())
    if (const auto* m = o->if_contains("model"); m && m->is_string()) return std::string(m->get_string());
  return {};
}

}  // namespace

std::string backends_key(const ModelPackage& package, std::string_view device, std::string_view preference) {
  std::string out;
  for (const auto& [name, component] : package.components) {
    if (component.format != "torchscript" && component.format != "aoti") continue;  // a tokenizer runs no model
    std::string backend;
    try {
      backend = plan_component_backend(package, name, device, preference).backend;
    } catch (const std::exception&) {
      backend = "refused";  // loading it fails the jobs with the reason; the key only has to differ
    }
    out += (out.empty() ? "" : ",") + name + "=" + backend;
  }
  return out;
}

struct TuneProbe::State {
  std::shared_ptr<Family> family;
  std::string model;
  JobSpec spec;
  std::string device;
  std::string shape_key, key;
  std::map<std::pair<std::size_t, std::size_t>, Prepared> prepared;  // (lease, batch)
  std::atomic<bool> warm{false};  // the modules' first calls are made
  std::size_t decode_batch = 0;   // set_decode_batch

  // Text encoding and noise for `batch` jobs (each its own seed), on the calling thread.
  void prepare(Prepared& p, std::size_t batch) {
    if (!p.jobs.empty()) return;
    for (std::size_t i = 0; i < batch; ++i) {
      auto s = spec;
      s.seed = spec.seed + i;
      p.jobs.push_back(family->create_job(std::move(s)));
      // An extend job's first frame is read from its video in the preprocess stage; the cost
      // measured is an image job's, so a grey picture at the job's size stands in.
      if (spec.extend) p.jobs.back()->first_frame = std::make_shared<const RgbImage>(RgbImage{
                           spec.width, spec.height, std::vector<std::uint8_t>(std::size_t(spec.width) * spec.height * 3, 128)});
      p.work.push_back(p.jobs.back().get());
    }
    family->prepare(device, p.work);
    p.scheduler = family->make_scheduler(*p.jobs.front());
    family->begin_denoise(p.work, device);
    std::vector<at::Tensor> latents;
    for (auto* w : p.work) latents.push_back(w->state.latents * p.scheduler->init_noise_sigma());
    p.x = p.scheduler->scale_model_input(latents.size() == 1 ? latents[0] : at::cat(latents, 0), 0);
    p.t = p.scheduler->timesteps()[0].reshape({1}).expand({static_cast<std::int64_t>(batch)}).contiguous();
  }

  void predict(Prepared& p) { family->predict(PredictCall{p.work, p.x, p.t, device}); }
  // In the calls the jobs' decode makes: at most decode_batch clips each (0: all at once).
  void decode(Prepared& p) {
    const auto n = decode_batch == 0 ? p.work.size() : decode_batch;
    for (std::size_t at = 0; at < p.work.size(); at += n) {
      const std::vector<FamilyJob*> part(p.work.begin() + static_cast<std::ptrdiff_t>(at),
                                         p.work.begin() + static_cast<std::ptrdiff_t>(std::min(at + n, p.work.size())));
      family->decode(device, part);
    }
  }
};

TuneProbe::TuneProbe(const LoadedModels& models, const json::value& spec, std::string device, std::string_view backend)
    : state_(std::make_unique<State>()) {
  if (models.models.empty()) throw_error(ErrorKind::invalid_argument, "auto-tune: no model loaded");
  const auto name = model_field(spec);
  for (const auto& [n, f] : models.models)
    if (name.empty() ? f == models.models.front().second : n == name) {
      state_->family = f;
      state_->model = n;
    }
  if (!state_->family) throw_error(ErrorKind::invalid_argument, "auto-tune: model '" + name + "' is not loaded");
  state_->spec = state_->family->validate(spec);
  state_->device = std::move(device);
  auto shape = to_json(state_->spec);
  for (const char* field : {"prompt", "negative_prompt", "seed", "name", "priority", "fps", "format", "image", "last_image",
                            "image_sha256", "last_image_sha256"})
    shape.erase(field);
  if (state_->spec.extend)  // the cost of the image job it runs as
    for (const char* field : {"video", "video_sha256", "extend"}) shape.erase(field);
  shape["image"] = has_first_frame(state_->spec);
  shape["last_image"] = !state_->spec.last_image.empty();
  shape["device_type"] = device_type_of(state_->device);
  shape["backends"] = backends_key(state_->family->package(), state_->device, backend);
  state_->shape_key = state_->family->key_prefix() + "|" + json::serialize(shape);
}

TuneProbe::~TuneProbe() = default;

void TuneProbe::set_decode_batch(std::size_t clips) { state_->decode_batch = clips; }

const std::string& TuneProbe::shape_key() const { return state_->shape_key; }

const std::string& TuneProbe::key() {
  if (state_->key.empty()) {
    const bool had = state_->prepared.count({0, 1}) > 0;
    auto& first = state_->prepared[{0, 1}];
    state_->prepare(first, 1);
    state_->key = "denoise|" + state_->family->denoise_key(*first.jobs.front(), *first.scheduler);
    if (!had) state_->prepared.erase({0, 1});  // prepared only for the key: not kept
  }
  return state_->key;
}

void TuneProbe::release() { state_->prepared.clear(); }
int TuneProbe::steps() const { return state_->spec.steps; }
const std::string& TuneProbe::model() const { return state_->model; }

TuneSample TuneProbe::measure(const TuneSetting& setting) {
  const auto start = Clock::now();
  const auto leases = std::max<std::size_t>(setting.leases, 1);
  std::vector<Prepared*> groups;
  for (std::size_t i = 0; i < leases; ++i) groups.push_back(&state_->prepared[{i, setting.batch}]);  // no map changes in threads

  // Phase ends: warmed up, denoiser calls done, decoder calls done.
  std::vector<Clock::time_point> ends;
  std::barrier sync(static_cast<std::ptrdiff_t>(leases), [&ends]() noexcept { ends.push_back(Clock::now()); });
  std::mutex failed_mutex;
  std::exception_ptr failed;
  auto run = [&](Prepared& p) {
    int phases = 0;
    try {
      set_intra_op_threads(static_cast<int>(setting.intra_op));
      state_->prepare(p, setting.batch);
      // A TorchScript method's first two calls (profiling, then optimising) are slow, once
      // per process rather than per shape (docs/PERFORMANCE.md): the first measure makes them.
      const bool first = !state_->warm;
      for (int i = 0; i < (first ? 2 : 1); ++i) state_->predict(p);
      for (int i = 0; i < (first ? 2 : 0); ++i) state_->decode(p);
      sync.arrive_and_wait();
      ++phases;
      for (int c = 0; c < kCalls; ++c) state_->predict(p);
      sync.arrive_and_wait();
      ++phases;
      state_->decode(p);
      sync.arrive_and_wait();
      ++phases;
    } catch (...) {
      {
        std::lock_guard lock(failed_mutex);
        if (!failed || classify(std::current_exception()) != ErrorKind::out_of_memory) failed = std::current_exception();
      }
      if (phases < 3) sync.arrive_and_drop();  // the others go on without this thread
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < leases; ++i) threads.emplace_back(run, std::ref(*groups[i]));
  // Lease 0 runs on a thread too: the caller's LibTorch thread count stays as it was.
  threads.emplace_back(run, std::ref(*groups[0]));
  for (auto& t : threads) t.join();

  TuneSample out;
  out.setting = setting;
  out.spent_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed) {
    if (classify(failed) != ErrorKind::out_of_memory) std::rethrow_exception(failed);
    out.out_of_memory = true;
    for (std::size_t i = 0; i < leases; ++i) state_->prepared.erase({i, setting.batch});  // free what it holds
    return out;
  }
  state_->warm = true;
  out.step_s = std::chrono::duration<double>(ends.at(1) - ends.at(0)).count() / kCalls;
  out.decode_s = std::chrono::duration<double>(ends.at(2) - ends.at(1)).count();
  return out;
}

}  // namespace vgen
