#include "stages/model/cuda_graph_calls.hpp"

#include "runtime/errors.hpp"

#include <ATen/ATen.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/MemPool.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <chrono>
#include <mutex>
#include <set>
#include <sstream>

namespace vgen {

namespace {

// One kept graph: its static buffers, its output and the graph. Held by shared_ptr, so an
// eviction while another thread replays it frees it only after that replay is enqueued.
struct Entry {
  std::mutex mutex;                // one replay at a time: copy-in, launch, clone
  std::vector<at::Tensor> inputs;  // static buffers on the module's device (the captured work reads them)
  at::Tensor output;               // static output (the graph's memory; every replay rewrites it)
  std::unique_ptr<CapturedGraph> graph;
  std::uint64_t last_use = 0;      // under State::mutex
};

// Keys seen fewer than warmup + 1 times are counted here; a server seeing ever new shapes would
// grow it without bound, so it is forgotten past this many (the counts restart: harmless).
constexpr std::size_t kMaxCountedKeys = 64;

class CudaGraph final : public CapturedGraph {
 public:
  explicit CudaGraph(c10::cuda::CUDAStream replay_stream) : replay_stream_(replay_stream) {}
  ~CudaGraph() override {
    // The graph's pool goes back to the allocator with it: let work queued on its stream (a
    // replay, the clone of its output) finish first.
    try {
      replay_stream_.synchronize();
    } catch (...) {  // a destructor must not throw; the device is broken anyway then
    }
  }
  void replay() override {
    const c10::cuda::CUDAGuard on_device(replay_stream_.device_index());  // the caller's current stream there
    graph_.replay();
  }
  at::cuda::CUDAGraph& graph() { return graph_; }

 private:
  c10::cuda::CUDAStream replay_stream_;
  at::cuda::CUDAGraph graph_;
};

// A capture that failed: at::cuda::CUDAGraph gives its memory pool back to the allocator only
// for a capture that ended (its reset()), so the pool a failed capture allocated from (up to a
// step's activations) would stay reserved for the process; it is ended and released here.
void abandon_capture(at::cuda::CUDAGraph& graph, c10::DeviceIndex device, c10::MempoolId_t pool) {
  try {
    graph.capture_end();  // ends the stream's capture if it is still on; throws if it was invalidated
  } catch (...) {
  }
  try {
    graph.pool();  // succeeds only for a capture that ended: the graph releases its pool itself then
    return;
  } catch (...) {
  }
  try {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool);
  } catch (...) {  // already ended
  }
  try {
    at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool);
  } catch (...) {
  }
  try {
    c10::cuda::CUDACachingAllocator::releasePool(device, pool);
    at::getHostAllocator(at::kCUDA)->release_pool(pool);
  } catch (...) {
  }
  // A capture error is not sticky, but stays the thread's last error, which the next kernel
  // launch check (cudaGetLastError) would report as its own: the eager call that follows.
  (void)cudaGetLastError();
}

class CudaCapturer final : public GraphCapturer {
 public:
  bool serves(c10::Device device) const override {
    return device.is_cuda() && torch::cuda::is_available() && device.index() < static_cast<int>(torch::cuda::device_count());
  }
  std::int64_t current_stream(c10::Device device) const override {
    return static_cast<std::int64_t>(c10::cuda::getCurrentCUDAStream(device.index()).id());
  }
  std::unique_ptr<CapturedGraph> capture(c10::Device device, const std::function<at::Tensor()>& body,
                                         at::Tensor& output) override {
    const auto current = c10::cuda::getCurrentCUDAStream(device.index());
    auto graph = std::make_unique<CudaGraph>(current);
    // As torch.cuda.graph: capture on a side stream (capture refuses the legacy default
    // stream), which first waits for the static inputs' copies queued on the current one.
    const auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
    c10::cuda::CUDAEvent copied;
    copied.record(current);
    copied.block(side);
    const c10::cuda::CUDAStreamGuard on_side(side);  // (and the device current)
    const auto pool = at::cuda::MemPool::graph_pool_handle(/*is_user_created=*/false);  // as CUDAGraph's own
    graph->graph().capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    try {
      output = body();
      graph->graph().capture_end();  // instantiates the graph
    } catch (...) {
      output = at::Tensor();
      abandon_capture(graph->graph(), device.index(), pool);
      throw;
    }
    // Replays run on the caller's stream; nothing ran yet (capture only records).
    return graph;
  }
};

std::string key_of(std::string_view method, const std::string& shapes, std::int64_t stream) {
  return std::string(method) + '\n' + shapes + '\n' + std::to_string(stream);
}

}  // namespace

struct CudaGraphCalls::State {
  mutable std::mutex mutex;
  std::map<std::string, int> counted;                       // calls so far of keys not captured
  std::map<std::string, std::shared_ptr<Entry>> graphs;     // kept graphs
  std::set<std::string> eager;                              // keys being captured, or whose capture failed
  std::uint64_t clock = 0;                                  // last_use stamps
};

std::string describe_inputs(const std::vector<at::Tensor>& inputs) {
  std::ostringstream out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i) out << ", ";
    if (!inputs[i].defined()) {
      out << "undefined";
      continue;
    }
    out << inputs[i].sizes() << ' ' << c10::toString(inputs[i].scalar_type());
  }
  return out.str();
}

std::shared_ptr<GraphCapturer> cuda_graph_capturer() {
  static const auto capturer = std::make_shared<CudaCapturer>();
  return capturer;
}

CudaGraphCalls::CudaGraphCalls(std::shared_ptr<const Module> inner, CudaGraphSite site,
                               std::shared_ptr<GraphCapturer> capturer, CudaGraphLimits limits)
    : inner_(std::move(inner)), site_(std::move(site)), capturer_(std::move(capturer)), limits_(limits),
      state_(std::make_unique<State>()) {}

CudaGraphCalls::~CudaGraphCalls() = default;

std::size_t CudaGraphCalls::graphs() const {
  std::lock_guard lock(state_->mutex);
  return state_->graphs.size();
}

std::shared_ptr<const Module> CudaGraphCalls::with_parameters(const std::map<std::string, at::Tensor>& replaced) const {
  return std::make_shared<CudaGraphCalls>(inner_->with_parameters(replaced), site_, capturer_, limits_);
}

at::Tensor CudaGraphCalls::call(std::string_view method, const std::vector<at::Tensor>& inputs) const {
  const auto device = inner_->device();
  if (OncePerJobCalls::active() || !capturer_->serves(device)) return inner_->call(method, inputs);
  const auto shapes = describe_inputs(inputs);
  const auto key = key_of(method, shapes, capturer_->current_stream(device));
  std::shared_ptr<Entry> entry;
  bool capture = false;
  {
    auto& s = *state_;
    std::lock_guard lock(s.mutex);
    if (s.eager.count(key)) {
      // running as usual: being captured by another thread, or not capturable
    } else if (auto it = s.graphs.find(key); it != s.graphs.end()) {
      entry = it->second;
      entry->last_use = ++s.clock;
    } else if (auto& n = s.counted[key]; ++n > limits_.warmup_calls) {
      s.counted.erase(key);
      s.eager.insert(key);  // until the capture is done
      capture = true;
    } else if (s.counted.size() > kMaxCountedKeys) {
      s.counted.clear();
    }
  }
  if (capture) return capture_and_run(key, method, shapes, inputs);
  if (!entry) return inner_->call(method, inputs);
  const c10::InferenceMode guard;  // the static buffers are inference tensors
  std::lock_guard lock(entry->mutex);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) entry->inputs[i].copy_(inputs[i]);
  entry->graph->replay();
  auto out = entry->output.clone();  // the caller keeps it; the next replay rewrites the static output
  record_cuda_graph_replay(site_);
  return out;
}

at::Tensor CudaGraphCalls::capture_and_run(const std::string& key, std::string_view method, const std::string& shapes,
                                           const std::vector<at::Tensor>& inputs) const {
  const auto device = inner_->device();
  auto entry = std::make_shared<Entry>();
  try {
    const c10::InferenceMode guard;
    // Same strides as the inputs (empty_like preserves dense layouts): TorchScript's profiled
    // graph guards on them, and a mismatch would send the capture down its fallback path.
    for (const auto& t : inputs)
      entry->inputs.push_back(t.defined() ? at::empty_like(t, t.options().device(device)).copy_(t) : t);
    const auto start = std::chrono::steady_clock::now();
    // The graph keeps the body as long as it lives (a fake replays it); the buffers it reads
    // are the entry's, which owns the graph.
    entry->graph = capturer_->capture(
        device,
        [inner = inner_, method = std::string(method), buffers = &entry->inputs] { return inner->call(method, *buffers); },
        entry->output);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    entry->graph->replay();  // this call's result: the buffers hold its inputs
    auto out = entry->output.clone();
    record_cuda_graph_capture(site_, method, shapes, ms);
    std::vector<std::shared_ptr<Entry>> evicted;  // freed after the lock (a CUDA graph waits for its stream)
    {
      auto& s = *state_;
      std::lock_guard lock(s.mutex);
      s.eager.erase(key);
      entry->last_use = ++s.clock;
      s.graphs[key] = entry;
      while (s.graphs.size() > std::max<std::size_t>(limits_.max_graphs, 1)) {
        auto oldest = s.graphs.begin();
        for (auto it = s.graphs.begin(); it != s.graphs.end(); ++it)
          if (it->second->last_use < oldest->second->last_use) oldest = it;
        evicted.push_back(std::move(oldest->second));
        s.graphs.erase(oldest);
      }
    }
    return out;
  } catch (const std::exception& e) {
    // The key stays in `eager`: never tried again by this decorator.
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    record_cuda_graph_failure(site_, method, shapes, truncate_utf8(c10 ? c10->what_without_backtrace() : e.what(), 400));
  }
  entry.reset();
  return inner_->call(method, inputs);
}

std::shared_ptr<const Module> with_cuda_graphs(std::shared_ptr<const Module> m, const CudaGraphSite& site) {
  if (!m || !model_backend_options().cuda_graphs || !m->device().is_cuda()) return m;
  static std::mutex mutex;
  static std::map<const Module*, std::shared_ptr<const Module>> decorators;  // the decorator holds its inner module
  std::lock_guard lock(mutex);
  auto& d = decorators[m.get()];
  if (!d) d = std::make_shared<CudaGraphCalls>(m, site, cuda_graph_capturer());
  return d;
}

std::shared_ptr<const Module> with_cuda_graphs(std::shared_ptr<const Module> m, const ModelPackage& package,
                                               const std::string& component) {
  if (!m || !model_backend_options().cuda_graphs || !m->device().is_cuda()) return m;
  CudaGraphSite site{.package = package.dir, .component = component, .device = m->device().str(),
                     .file = package.component(component).file};
  return with_cuda_graphs(std::move(m), site);
}

}  // namespace vgen
