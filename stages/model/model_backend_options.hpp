// ModelBackendOptions: the model backends' own settings (stages/model/model_backend.hpp), in a
// component without LibTorch so that api/config.hpp holds them as they are (config key
// "model_backend"), with the pure decisions they lead to. The Runtime (api/engine.cpp) checks
// them, then applies them process-wide before any module is called: fusion through
// stages/model/torch_devices.hpp, the rest through set_model_backend_options below (read by
// every TorchScript call, stages/model/model_backend.cpp).
// Thread-safety: the functions here are pure, except set_/model_backend_options (an atomic and a mutex: safe
// from any thread). Not cancellable; nothing blocks.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace vgen {

struct ModelBackendOptions {
  // Whether LibTorch's TorchScript executor may fuse a CUDA graph's element-wise ops into
  // kernels it generates and compiles at run time (NNC through NVRTC). Measured on an H200
  // (Wan 2.1 1.3B bf16, 832x480x81, docs/PERFORMANCE.md): fused steps are 11 % faster (1.12 s
  // against 1.27 s; 16 % at batch 8, 33 frames), but the compile costs 11 to 13 s in the first
  // steps of every new shape in every process. It pays after about 80 steps of one shape, so
  // it suits a process that lives on and not a one-off render. Unset ("auto"): on for
  // `vgen serve` and `vgen worker` (they set it, unless torchscript_gpu_optimize is false),
  // off otherwise. CPU graphs are not fused by LibTorch by default and are unaffected. Config
  // key "model_backend.torchscript_gpu_fusion" (true, false or "auto"). Process-wide: the last
  // Runtime built sets it.
  std::optional<bool> torchscript_gpu_fusion;

  // Whether LibTorch's profiling executor may optimise the TorchScript graphs called on a CUDA
  // device. It profiles a graph's first call and optimises it at the second; with the fuser off
  // that has little to gain there and costs the first two calls (GPU check on an H200,
  // 2026-11-28, Wan 2.1 1.3B bf16, 832x480x81, fusion off: vgen's first three steps 5.28, 1.96,
  // 1.24 s against diffusers' 3.90, 1.23, 1.24; its one VAE decode 4.41 s against 2.95). false: every TorchScript call on
  // a CUDA device runs the graph as exported (no profiling run, no optimising passes), the
  // once-per-job modules (text encoders, VAEs) included. true: optimised, as LibTorch does by
  // default, every module. Unset ("auto", the default): as on a CPU, the denoiser (called every
  // step) optimised and the once-per-job modules as exported, unless fusion is on (then every
  // module optimised: fusion is the optimiser's). Why: a module called once per job only ever
  // runs its profiling first call, so the optimiser costs it that run's overhead and gives it
  // nothing (measured on a CPU, model_backend.hpp's OncePerJobCalls; the GPU check's
  // decode_probe measures the VAE both ways on the card, vgen_single_unoptimised the denoiser
  // too). Fusion runs inside the optimiser: false with
  // torchscript_gpu_fusion true is refused (check_model_backend_options). CPU devices are not
  // affected (there the once-per-job modules always run as exported, the denoiser optimised:
  // model_backend.hpp's OncePerJobCalls). Config key "model_backend.torchscript_gpu_optimize"
  // (true, false or "auto"). Process-wide: the last Runtime built sets it.
  std::optional<bool> torchscript_gpu_optimize;

  // Which of PyTorch's scaled-dot-product attention kernels a CUDA call tries first: backends
  // named by attention_backend_names() ("flash", "efficient", "cudnn", "math"), most preferred
  // first; those not named follow in PyTorch's own order, so a backend that cannot serve a call
  // (a mask, a head size, a dtype) still falls through to one that can. Empty (the default):
  // PyTorch's order (flash, efficient, math, cudnn: cuDNN's kernel is never reached, as math
  // serves everything). CPU calls have their own choice (flash for CPU, math) and ignore it.
  // Config key "model_backend.attention" (a list, or "auto" for empty). Process-wide: applied
  // by the Runtime (torch_devices.hpp's set_attention_priority); the last Runtime built sets it.
  std::vector<std::string> attention;

  // Whether the denoiser's calls on a CUDA device replay captured CUDA graphs
  // (stages/model/cuda_graph_calls.hpp): per (method, input shapes and dtypes, stream), three
  // calls run as usual, the fourth is captured, later ones copy their inputs into the graph's
  // buffers and replay it, which saves the kernel launches' host time (one launch for the
  // whole step). Not measured on a GPU yet (docs/PERFORMANCE.md): the GPU check's
  // vgen_single_graphs phase measures it. Off by default: each graph pins a step's
  // activations in its own memory pool, and a call that cannot be captured costs a failed
  // capture (then runs as usual). CPU devices ignore it. Config key "model_backend.cuda_graphs"
  // (true, false, or "auto" = false). Process-wide: the last Runtime built sets it.
  bool cuda_graphs = false;
};

// The backend names model_backend.attention accepts.
const std::vector<std::string>& attention_backend_names();

// PyTorch's own order of those names, then what it becomes with `first` in front: the full
// order set_attention_priority applies. Pure.
std::vector<std::string> attention_priority_order(const std::vector<std::string>& first);

// Error(invalid_argument) naming both fields when torchscript_gpu_optimize is false and
// torchscript_gpu_fusion true (fusion needs the optimiser). "auto" fusion is no conflict: it
// resolves to off where the optimiser is off. Error(invalid_argument) naming
// model_backend.attention for a name it does not know (listing those it does) or one given twice.
void check_model_backend_options(const ModelBackendOptions& options);

// For a process that lives on (`vgen serve`, `vgen worker`): "auto" fusion becomes on, unless
// torchscript_gpu_optimize is false (then off: fusion needs the optimiser). Pure.
void fuse_when_auto(ModelBackendOptions& options);

// Which TorchScript calls: those of a module called at every step (the denoiser), or those
// of a module a job calls once (text encoders, VAEs; OncePerJobCalls).
enum class TorchScriptCalls { every_step, once_per_job };

// Whether LibTorch's profiling executor may optimise these calls on a CUDA device (`cuda`)
// or a CPU one. CPU: the denoiser yes, once-per-job modules no (measured: model_backend.hpp),
// whatever the options say. CUDA: torchscript_gpu_optimize when set; "auto" answers as a CPU
// does; with fusion on always yes (a pair check_model_backend_options refuses gets fusion's answer).
// A no means "turn it off for these calls"; a yes leaves the calling thread's setting as it
// is (LibTorch's default is on; a bench may have turned it off). Pure.
bool torchscript_optimizes(bool cuda, TorchScriptCalls calls, const ModelBackendOptions& options);

// The options TorchScript calls follow in this process (default: all "auto"). The Runtime sets
// them before any module runs; the last Runtime built wins, as for fusion. Thread-safe.
void set_model_backend_options(const ModelBackendOptions& options);
ModelBackendOptions model_backend_options();

}  // namespace vgen
