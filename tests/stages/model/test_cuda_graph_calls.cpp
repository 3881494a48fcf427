#include "stages/model/cuda_graph_calls.hpp"

#include "stages/model/cuda_graph_uses.hpp"
#include "stages/model/model_backend_options.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

using namespace vgen;

namespace {

// y = x * weight + 1 (on a CPU): counts its calls.
class Doubling final : public Module {
 public:
  explicit Doubling(double weight, c10::Device device = c10::Device(c10::kCPU))
      : weight_(at::full({1}, weight)), device_(device) {}
  at::Tensor call(std::string_view method, const std::vector<at::Tensor>& inputs) const override {
    if (method != "forward") throw std::invalid_argument("no method");
    ++calls;
    return inputs.at(0) * weight_.to(inputs.at(0).scalar_type()) + 1;
  }
  c10::Device device() const override { return device_; }  // a "CUDA" one still computes on the CPU
  c10::ScalarType dtype() const override { return c10::kFloat; }
  std::map<std::string, at::Tensor> parameters() const override { return {{"weight", weight_}}; }
  std::shared_ptr<const Module> with_parameters(const std::map<std::string, at::Tensor>& replaced) const override {
    return std::make_shared<Doubling>(replaced.at("weight").item<double>());
  }
  mutable std::atomic<int> calls{0};

 private:
  at::Tensor weight_;
  c10::Device device_;
};

// A "graph" that records the body at capture and runs it again, on the static buffers, at replay.
class FakeGraph final : public CapturedGraph {
 public:
  FakeGraph(std::function<at::Tensor()> body, at::Tensor* output, std::atomic<int>* replays)
      : body_(std::move(body)), output_(output), replays_(replays) {}
  void replay() override {
    output_->copy_(body_());
    ++*replays_;
  }

 private:
  std::function<at::Tensor()> body_;
  at::Tensor* output_;
  std::atomic<int>* replays_;
};

thread_local std::int64_t t_stream = 0;  // the calling thread's "current stream"

class FakeCapturer final : public GraphCapturer {
 public:
  bool serves(c10::Device) const override { return serve; }
  std::int64_t current_stream(c10::Device) const override { return t_stream; }
  std::unique_ptr<CapturedGraph> capture(c10::Device, const std::function<at::Tensor()>& body, at::Tensor& output) override {
    ++captures;
    if (fail) throw std::runtime_error("operation not permitted when stream is capturing");
    output = body();
    return std::make_unique<FakeGraph>(body, &output, &replays);
  }
  bool serve = true;
  bool fail = false;
  std::atomic<int> captures{0};
  std::atomic<int> replays{0};
};

const CudaGraphSite kSite{.package = "/p", .component = "transformer", .device = "cuda:0", .file = "/p/transformer.pt"};

CudaGraphUse use() {
  const auto all = cuda_graph_uses();
  return all.empty() ? CudaGraphUse{} : all.front();
}

at::Tensor ones(std::vector<int64_t> shape, double v = 1.0, at::ScalarType dtype = at::kFloat) {
  return at::full(shape, v, at::TensorOptions().dtype(dtype));
}

}  // namespace

TEST_CASE("CudaGraphCalls: warm-up calls run as usual, the next captures, later ones replay on refreshed buffers") {
  clear_cuda_graph_uses();
  t_stream = 7;
  auto inner = std::make_shared<Doubling>(2.0);
  auto capturer = std::make_shared<FakeCapturer>();
  const CudaGraphCalls graphs(inner, kSite, capturer, {.warmup_calls = 3, .max_graphs = 4});
  for (int i = 1; i <= 3; ++i) {
    CHECK(graphs.call("forward", {ones({2, 3}, i)}).equal(ones({2, 3}, 2.0 * i + 1)));
    CHECK(inner->calls == i);
  }
  CHECK(capturer->captures == 0);
  CHECK(graphs.graphs() == 0);
  // The fourth call captures (the body runs once under capture) and replays for its result.
  CHECK(graphs.call("forward", {ones({2, 3}, 4)}).equal(ones({2, 3}, 9)));
  CHECK(capturer->captures == 1);
  CHECK(capturer->replays == 1);
  CHECK(graphs.graphs() == 1);
  CHECK(use().captures == 1);
  // Later calls replay: the static buffers hold each call's own inputs.
  const int before = inner->calls;
  CHECK(graphs.call("forward", {ones({2, 3}, 10)}).equal(ones({2, 3}, 21)));
  CHECK(graphs.call("forward", {ones({2, 3}, -1)}).equal(ones({2, 3}, -1)));
  CHECK(capturer->replays == 3);
  CHECK(inner->calls == before + 2);  // only the fake replays ran the body
  CHECK(capturer->captures == 1);
  CHECK(use().replays == 2);
  CHECK(use().failures == 0);
  clear_cuda_graph_uses();
}

TEST_CASE("CudaGraphCalls: outputs are clones, never the static output nor each other") {
  clear_cuda_graph_uses();
  t_stream = 1;
  auto capturer = std::make_shared<FakeCapturer>();
  const CudaGraphCalls graphs(std::make_shared<Doubling>(1.0), kSite, capturer, {.warmup_calls = 0, .max_graphs = 4});
  auto a = graphs.call("forward", {ones({4}, 1)});  // captured
  auto b = graphs.call("forward", {ones({4}, 5)});  // replayed
  auto c = graphs.call("forward", {ones({4}, 7)});  // replayed again
  CHECK(capturer->replays == 3);
  CHECK(a.equal(ones({4}, 2)));  // unchanged by the later replays
  CHECK(b.equal(ones({4}, 6)));
  CHECK(c.equal(ones({4}, 8)));
  CHECK(a.data_ptr() != b.data_ptr());
  CHECK(b.data_ptr() != c.data_ptr());
  clear_cuda_graph_uses();
}

TEST_CASE("CudaGraphCalls: a new shape, dtype or stream is a new key with its own warm-up") {
  clear_cuda_graph_uses();
  t_stream = 1;
  auto capturer = std::make_shared<FakeCapturer>();
  const CudaGraphCalls graphs(std::make_shared<Doubling>(2.0), kSite, capturer, {.warmup_calls = 2, .max_graphs = 8});
  auto run = [&](const at::Tensor& x, int times) {
    for (int i = 0; i < times; ++i) CHECK(graphs.call("forward", {x}).equal(x * 2 + 1));
  };
  run(ones({2, 3}), 3);
  CHECK(capturer->captures == 1);
  run(ones({3, 2}), 2);  // another shape: warming up
  CHECK(capturer->captures == 1);
  run(ones({3, 2}), 1);
  CHECK(capturer->captures == 2);
  run(ones({2, 3}, 1.0, at::kDouble), 3);  // another dtype
  CHECK(capturer->captures == 3);
  t_stream = 2;  // another stream (another compute thread's)
  run(ones({2, 3}), 2);
  CHECK(capturer->captures == 3);
  run(ones({2, 3}), 1);
  CHECK(capturer->captures == 4);
  CHECK(graphs.graphs() == 4);
  clear_cuda_graph_uses();
}

TEST_CASE("CudaGraphCalls: at most max_graphs graphs, the least recently used evicted") {
  clear_cuda_graph_uses();
  t_stream = 1;
  auto capturer = std::make_shared<FakeCapturer>();
  const CudaGraphCalls graphs(std::make_shared<Doubling>(2.0), kSite, capturer, {.warmup_calls = 0, .max_graphs = 2});
  const auto a = ones({1}), b = ones({2}), c = ones({3});
  graphs.call("forward", {a});  // captures A
  graphs.call("forward", {b});  // captures B
  graphs.call("forward", {a});  // replays A: B is now the least recently used
  CHECK(capturer->captures == 2);
  graphs.call("forward", {c});  // captures C, evicts B
  CHECK(capturer->captures == 3);
  CHECK(graphs.graphs() == 2);
  const int replays = capturer->replays;
  graphs.call("forward", {a});  // A kept: a replay
  CHECK(capturer->replays == replays + 1);
  CHECK(graphs.call("forward", {b}).equal(b * 2 + 1));  // B was evicted: captured again
  CHECK(capturer->captures == 4);
  CHECK(graphs.graphs() == 2);
  clear_cuda_graph_uses();
}

TEST_CASE("CudaGraphCalls: a failed capture leaves that key running as usual, with one recorded failure") {
  clear_cuda_graph_uses();
  t_stream = 1;
  auto inner = std::make_shared<Doubling>(3.0);
  auto capturer = std::make_shared<FakeCapturer>();
  capturer->fail = true;
  const CudaGraphCalls graphs(inner, kSite, capturer, {.warmup_calls = 1, .max_graphs = 4});
  for (int i = 0; i < 6; ++i) CHECK(graphs.call("forward", {ones({2}, i)}).equal(ones({2}, 3.0 * i + 1)));
  CHECK(capturer->captures == 1);  // tried once only
  CHECK(capturer->replays == 0);
  CHECK(inner->calls == 6);
  CHECK(graphs.graphs() == 0);
  CHECK(use().failures == 1);
  CHECK(use().captures == 0);
  // Another key is still tried.
  capturer->fail = false;
  graphs.call("forward", {ones({3})});
  graphs.call("forward", {ones({3})});
  CHECK(capturer->captures == 2);
  CHECK(graphs.graphs() == 1);
  // An inner error is the caller's, not swallowed by a capture.
  CHECK_THROWS_AS(graphs.call("missing", {ones({3})}), std::invalid_argument);
  CHECK_THROWS_AS(graphs.call("missing", {ones({3})}), std::invalid_argument);  // the capture's failure, then the call's
  clear_cuda_graph_uses();
}

TEST_CASE("CudaGraphCalls: with_parameters is a new decorator with fresh graphs over the new weights") {
  clear_cuda_graph_uses();
  t_stream = 1;
  auto capturer = std::make_shared<FakeCapturer>();
  const CudaGraphCalls graphs(std::make_shared<Doubling>(2.0), kSite, capturer, {.warmup_calls = 0, .max_graphs = 4});
  graphs.call("forward", {ones({2})});
  CHECK(graphs.graphs() == 1);
  CHECK(graphs.parameters().at("weight").item<double>() == 2.0);
  const auto lora = graphs.with_parameters({{"weight", at::full({1}, 5.0)}});
  const auto* decorated = dynamic_cast<const CudaGraphCalls*>(lora.get());
  REQUIRE(decorated != nullptr);
  CHECK(decorated->graphs() == 0);
  CHECK(lora->call("forward", {ones({2})}).equal(ones({2}, 6)));  // its own capture, on its weights
  CHECK(decorated->graphs() == 1);
  CHECK(graphs.call("forward", {ones({2})}).equal(ones({2}, 3)));  // the original's graph is untouched
  CHECK(capturer->captures == 2);
  clear_cuda_graph_uses();
}

TEST_CASE("CudaGraphCalls: calls inside OncePerJobCalls, or on a device the capturer does not serve, are never graphed") {
  clear_cuda_graph_uses();
  t_stream = 1;
  auto capturer = std::make_shared<FakeCapturer>();
  const CudaGraphCalls graphs(std::make_shared<Doubling>(2.0), kSite, capturer, {.warmup_calls = 0, .max_graphs = 4});
  {
    const OncePerJobCalls once("cpu");
    CHECK(OncePerJobCalls::active());
    for (int i = 0; i < 5; ++i) CHECK(graphs.call("forward", {ones({2})}).equal(ones({2}, 3)));
  }
  CHECK_FALSE(OncePerJobCalls::active());
  CHECK(capturer->captures == 0);
  capturer->serve = false;
  for (int i = 0; i < 5; ++i) graphs.call("forward", {ones({2})});
  CHECK(capturer->captures == 0);
  CHECK(graphs.graphs() == 0);
  capturer->serve = true;
  graphs.call("forward", {ones({2})});
  CHECK(capturer->captures == 1);
  clear_cuda_graph_uses();
}

TEST_CASE("CudaGraphCalls: threads on their own streams each get their own graph" * doctest::timeout(120)) {
  clear_cuda_graph_uses();
  auto capturer = std::make_shared<FakeCapturer>();
  const CudaGraphCalls graphs(std::make_shared<Doubling>(2.0), kSite, capturer, {.warmup_calls = 3, .max_graphs = 8});
  for (int threads : {2, 4}) {
    std::vector<std::thread> pool;
    std::atomic<int> wrong{0};
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        t_stream = 100 * threads + t;
        for (int i = 0; i < 20; ++i)
          if (!graphs.call("forward", {ones({2, 2}, t + i)}).equal(ones({2, 2}, 2.0 * (t + i) + 1))) ++wrong;
      });
    for (auto& th : pool) th.join();
    CHECK(wrong == 0);
  }
  CHECK(capturer->captures == 6);  // one per stream
  CHECK(graphs.graphs() == 6);
  clear_cuda_graph_uses();
}

// threads.per_gpu leases queue on their GPU's one stream (api/compute_devices.hpp): their calls of
// a shape share one graph, and each call still gets its own input's result (copy-in, replay and
// clone of one graph are serialised).
TEST_CASE("CudaGraphCalls: threads on one stream share its graph; each call gets its own result" * doctest::timeout(120)) {
  clear_cuda_graph_uses();
  auto capturer = std::make_shared<FakeCapturer>();
  const CudaGraphCalls graphs(std::make_shared<Doubling>(2.0), kSite, capturer, {.warmup_calls = 3, .max_graphs = 8});
  constexpr int kThreads = 4, kCalls = 200;
  std::vector<std::thread> pool;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      t_stream = 7;  // the same stream on every thread
      for (int i = 0; i < kCalls; ++i) {
        const double x = 1000.0 * t + i;
        if (!graphs.call("forward", {ones({64, 64}, x)}).equal(ones({64, 64}, 2.0 * x + 1))) ++wrong;
      }
    });
  for (auto& th : pool) th.join();
  CHECK(wrong == 0);
  CHECK(capturer->captures == 1);
  CHECK(graphs.graphs() == 1);
  // Calls after the three warm-ups replayed, but for those that came while the capture was under
  // way (they run as usual; how many depends on the scheduler). Once captured, a call on that
  // stream from yet another thread replays the same graph.
  CHECK(capturer->replays <= kThreads * kCalls - 3);
  const int before = capturer->replays;
  std::thread([&] {
    t_stream = 7;
    if (!graphs.call("forward", {ones({64, 64}, 5.0)}).equal(ones({64, 64}, 11.0))) ++wrong;
  }).join();
  CHECK(wrong == 0);
  CHECK(capturer->replays == before + 1);
  CHECK(capturer->captures == 1);
  clear_cuda_graph_uses();
}

TEST_CASE("with_cuda_graphs: the module itself unless the option is on and the module runs on a CUDA device; then one decorator per module") {
  auto cpu = std::make_shared<Doubling>(2.0);
  CHECK(with_cuda_graphs(cpu, kSite) == cpu);
  auto options = model_backend_options();
  options.cuda_graphs = true;
  set_model_backend_options(options);
  CHECK(model_backend_options().cuda_graphs);
  CHECK(with_cuda_graphs(cpu, kSite) == cpu);  // a CPU module
  // A module on a CUDA device gets the process's one decorator for it, which passes every call
  // straight through where LibTorch sees no such device (this machine, when it has no GPU).
  auto cuda = std::make_shared<Doubling>(2.0, c10::Device(c10::kCUDA, 0));
  const auto decorated = with_cuda_graphs(cuda, kSite);
  CHECK(decorated != cuda);
  CHECK(dynamic_cast<const CudaGraphCalls*>(decorated.get()) != nullptr);
  CHECK(with_cuda_graphs(cuda, kSite) == decorated);
  CHECK(decorated->parameters().at("weight").item<double>() == 2.0);
  if (!cuda_graph_capturer()->serves(c10::Device(c10::kCUDA, 0))) {
    for (int i = 0; i < 6; ++i) CHECK(decorated->call("forward", {ones({2})}).equal(ones({2}, 3)));
    CHECK(cuda->calls == 6);
    CHECK(dynamic_cast<const CudaGraphCalls&>(*decorated).graphs() == 0);
  }
  CHECK_FALSE(cuda_graph_capturer()->serves(c10::Device(c10::kCPU)));
  options.cuda_graphs = false;
  set_model_backend_options(options);
  CHECK_FALSE(model_backend_options().cuda_graphs);
  CHECK(with_cuda_graphs(cuda, kSite) == cuda);  // off: the module itself
}

TEST_CASE("describe_inputs names each input's shape and dtype") {
  CHECK(describe_inputs({ones({1, 16, 3}), ones({1}, 1.0, at::kBFloat16), at::Tensor()}) ==
        "[1, 16, 3] Float, [1] BFloat16, undefined");
}

namespace {

// y = x * 2 + 1 on CUDA, or, with `sync`, a value read back to the host first (which a capture refuses).
class CudaAffine final : public Module {
 public:
  explicit CudaAffine(bool sync) : sync_(sync) {}
  at::Tensor call(std::string_view, const std::vector<at::Tensor>& inputs) const override {
    const auto& x = inputs.at(0);
    if (sync_ && x.sum().item<double>() < -1e30) return x;  // never true: only the host read matters
    return x * 2 + 1;
  }
  c10::Device device() const override { return c10::Device(c10::kCUDA, 0); }
  c10::ScalarType dtype() const override { return c10::kFloat; }

 private:
  bool sync_;
};

}  // namespace

// The thin at::cuda::CUDAGraph part, where this machine has a GPU (skipped with a warning elsewhere).
TEST_CASE("cuda_graph_capturer on a GPU: replays see new inputs; a synchronising call runs as usual") {
  if (!cuda_graph_capturer()->serves(c10::Device(c10::kCUDA, 0))) {
    WARN_MESSAGE(false, "no CUDA device: the CUDA capture is not exercised here");
    return;
  }
  clear_cuda_graph_uses();
  const auto on_cuda = [](double v) { return at::full({64, 64}, v, at::TensorOptions().device(at::kCUDA)); };
  const CudaGraphCalls graphs(std::make_shared<CudaAffine>(false), kSite, cuda_graph_capturer(), {.warmup_calls = 2});
  for (int i = 0; i < 8; ++i) CHECK(graphs.call("forward", {on_cuda(i)}).cpu().equal(at::full({64, 64}, 2.0 * i + 1)));
  CHECK(graphs.graphs() == 1);
  CHECK(use().captures == 1);
  CHECK(use().replays == 5);
  CHECK(use().failures == 0);
  const CudaGraphCalls syncing(std::make_shared<CudaAffine>(true), kSite, cuda_graph_capturer(), {.warmup_calls = 1});
  for (int i = 0; i < 4; ++i) CHECK(syncing.call("forward", {on_cuda(i)}).cpu().equal(at::full({64, 64}, 2.0 * i + 1)));
  CHECK(syncing.graphs() == 0);
  CHECK(use().failures == 1);
  CHECK(graphs.call("forward", {on_cuda(9)}).cpu().equal(at::full({64, 64}, 19.0)));  // the device is still fine
  clear_cuda_graph_uses();
}
