// CudaGraphCalls: a Module decorator that serves an inner module's calls (the denoiser's, once
// per step) by replaying captured CUDA graphs, so that a step costs one graph launch instead of
// the host time of its hundreds of kernel launches (model_backend.cuda_graphs,
// stages/model/model_backend_options.hpp; off by default, not yet measured on a GPU).
//
// Per key (method, every input's shape and dtype, the calling thread's current stream id):
// - the first CudaGraphLimits::warmup_calls (3) calls run the inner module as usual
//   (TorchScript's profiling executor profiles and optimises its graph in its first two;
//   AOTInductor loads its kernels);
// - the next call captures: its inputs are copied into static buffers on the module's device,
//   the inner call is captured on a side stream from LibTorch's pool into the graph's own memory
//   pool (as torch.cuda.graph does; thread-local capture mode, so that other compute threads'
//   CUDA calls are not refused meanwhile), then replayed for this call;
// - later calls copy their inputs into the static buffers, replay on the current stream and
//   return a clone of the static output. A clone, because callers keep a step's output across
//   steps (the scheduler's state, step caches) while the next replay overwrites the static one.
// A capture that fails (an op that synchronises, a kernel that cannot be captured, a host
// copy) leaves that key running as usual for the decorator's life, with one warning naming the
// file, method, shapes and PyTorch's message (stages/model/cuda_graph_uses.hpp); the call
// itself then runs as usual, so a job never fails for it.
// At most max_graphs graphs are kept (least recently used evicted): each pins one call's
// activations in its memory pool (at 832x480x81 a Wan 1.3B step's are gigabytes), so a server
// seeing many shapes keeps only its most used few.
// Straight to the inner module: calls on a device the capturer does not serve (CPU), and
// calls inside OncePerJobCalls (text encoders, VAEs: a VAE graph would pin gigabytes for the
// process's life; model_backend.hpp).
//
// Ownership: the decorator owns its graphs and their buffers, and shares the inner module.
// with_parameters (LoRA) returns a new decorator around the inner module's result, with no
// graphs (a graph replays the weights it was captured with).
// Thread-safety: call may be made from several threads at once. Keys include the stream; the
// compute threads of one GPU (threads.per_gpu >= 2) share its one stream and so its graphs:
// one graph's replays are serialised by its own mutex (copy-in, launch, clone are enqueued on
// the one stream in order, so a replay never overwrites inputs another has not read). Warm-up and eager calls run unlocked, as the inner module allows.
// Blocking: a capture blocks its caller for the capture (host time); evicting a graph waits
// for its stream to finish the work queued there (its memory may be in use). Cancellation:
// none inside a call; a cancelled job simply makes no more calls.
// Note: this header includes ATen; never include spdlog/fmt next to it.
#pragma once

#include "stages/model/cuda_graph_uses.hpp"
#include "stages/model/model_backend.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

// One captured graph.
class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  // Runs the captured work again on the calling thread's current stream (the one it was
  // captured for), reading the static inputs and writing the static output.
  virtual void replay() = 0;
};

// The capture and replay primitive, injectable: cuda_graph_capturer() is at::cuda::CUDAGraph's;
// a test drives the decorator with a fake one on a CPU.
class GraphCapturer {
 public:
  virtual ~GraphCapturer() = default;
  // Whether calls on `device` may be graphed at all.
  virtual bool serves(c10::Device device) const = 0;
  // The calling thread's current stream on `device` (part of the key).
  virtual std::int64_t current_stream(c10::Device device) const = 0;
  // Captures the device work of one run of `body`; `output` is set to body's result (the static
  // output, written by every replay). Throws whatever capture raised; nothing is kept then.
  virtual std::unique_ptr<CapturedGraph> capture(c10::Device device, const std::function<at::Tensor()>& body,
                                                 at::Tensor& output) = 0;
};

// at::cuda::CUDAGraph: serves CUDA devices when this process sees one. Safe on a CPU-only
// machine (serves nothing there).
std::shared_ptr<GraphCapturer> cuda_graph_capturer();

struct CudaGraphLimits {
  int warmup_calls = 3;        // eager calls per key before its capture
  std::size_t max_graphs = 4;  // graphs kept per decorator (LRU)
};

class CudaGraphCalls final : public Module {
 public:
  CudaGraphCalls(std::shared_ptr<const Module> inner, CudaGraphSite site, std::shared_ptr<GraphCapturer> capturer,
                 CudaGraphLimits limits = {});
  ~CudaGraphCalls() override;

  at::Tensor call(std::string_view method, const std::vector<at::Tensor>& inputs) const override;
  c10::Device device() const override { return inner_->device(); }
  c10::ScalarType dtype() const override { return inner_->dtype(); }
  bool has_method(std::string_view method) const override { return inner_->has_method(method); }
  bool serves(std::string_view method, const std::vector<at::Tensor>& inputs) const override {
    return inner_->serves(method, inputs);
  }
  std::string unloadable(std::string_view method) const override { return inner_->unloadable(method); }
  std::map<std::string, at::Tensor> parameters() const override { return inner_->parameters(); }
  std::shared_ptr<const Module> with_parameters(const std::map<std::string, at::Tensor>& replaced) const override;

  const std::shared_ptr<const Module>& inner() const { return inner_; }
  std::size_t graphs() const;  // graphs kept now (tests, diagnostics)

 private:
  struct State;
  at::Tensor capture_and_run(const std::string& key, std::string_view method, const std::string& shapes,
                             const std::vector<at::Tensor>& inputs) const;
  std::shared_ptr<const Module> inner_;
  CudaGraphSite site_;
  std::shared_ptr<GraphCapturer> capturer_;
  CudaGraphLimits limits_;
  std::unique_ptr<State> state_;
};

// "[1, 16, 3, 4, 4] bfloat16, [1] float32": the inputs' shapes and dtypes, as keys and logs name them.
std::string describe_inputs(const std::vector<at::Tensor>& inputs);

// What a family calls its denoiser through: `m` itself unless model_backend.cuda_graphs is on
// and m runs on a CUDA device; then the process's one decorator for `m` (made on first use with
// cuda_graph_capturer(), kept as long as the process, as ModuleCache keeps `m`). For modules the
// ModuleCache holds: a per-job module (a LoRA variant) would be kept alive by it. Thread-safe.
std::shared_ptr<const Module> with_cuda_graphs(std::shared_ptr<const Module> m, const CudaGraphSite& site);
// The same for `component` of `package` (its site: the package, component, m's device, its file).
std::shared_ptr<const Module> with_cuda_graphs(std::shared_ptr<const Module> m, const ModelPackage& package,
                                               const std::string& component);

}  // namespace vgen
