// Model backends: how an exported component file becomes something the stages can call.
// Backends are plug-ins chosen by name, not a switch: "torchscript" (torch::jit) and "aoti"
// (an AOTInductor .pt2, stages/model/aoti_package.hpp; one compiled model per method).
// Which one serves a package's component on a device is the package's: get_component takes its
// compiled file for the device type when there is one and it loads, else its TorchScript file
// (stages/model/component_backends.hpp), once per process.
//
// Devices: "cpu", "cpu:N" (N names a CPU replica: its own module copy and threads, same
// hardware) and "cuda:N". The same code runs on both; only the at::Device differs.
// Loading: ModuleCache loads each (backend, file, device, dtype) once, even when many jobs ask
// at the same time, and shares it with every job on that device.
// Thread-safety: Module::forward may be called from several threads at once (TorchScript
// inference is re-entrant; an AOTInductor model container runs one call per model instance and
// queues the others); the cache is thread-safe.
// Errors: a missing, truncated or corrupt file -> Error(invalid_argument) naming the file; so
// is a file for a CPU device larger than the memory left (runtime/host_memory.hpp), checked
// before it is read.
// Note: this header includes ATen; never include spdlog/fmt next to it (the torch wheel's
// bundled fmt clashes with Debian's).
#pragma once

#include "stages/model/component_backends.hpp"
#include "stages/model/model_backend_options.hpp"
#include "stages/model/model_package.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

c10::Device parse_torch_device(std::string_view id);  // Error(invalid_argument) on bad ids

// In its scope, TorchScript calls on this thread skip LibTorch's profiling executor (its
// profiling first call and the optimising passes of the second) and run the graph as exported
// when torchscript_optimizes(device, calls, model_backend_options()) says no
// (stages/model/model_backend_options.hpp); otherwise the thread's setting is left as it is.
// Every TorchScript call opens one for its module's device (TorchScriptCalls::every_step):
// with model_backend.torchscript_gpu_optimize false, every call on a CUDA device runs as
// exported, whichever thread makes it (compute threads, warm-up, the tuner's probe threads).
// Limit: LibTorch keeps a graph's optimised plan once made and serves it whatever the setting
// (and its unoptimised plan is served only while the setting is off), so the setting decides
// for a module when it is first called, and must not change while a process runs modules.
// Thread-safety: the setting is LibTorch's, per thread (a thread_local in LibTorch 2.11's
// update_graph_executor_opt.cpp); restored when the scope ends.
class TorchScriptOptimizerScope {
 public:
  TorchScriptOptimizerScope(c10::Device device, TorchScriptCalls calls);
  ~TorchScriptOptimizerScope();
  TorchScriptOptimizerScope(const TorchScriptOptimizerScope&) = delete;
  TorchScriptOptimizerScope& operator=(const TorchScriptOptimizerScope&) = delete;

 private:
  bool restore_ = false;
};

// The scope for the modules a job calls once (text encoder, VAE), which the Batcher opens
// around preprocess and decode. On a CPU they run as exported: measured on the large bench
// package's VAE decoder (CPU, one thread), the first two calls of a fresh process took 0.33 and
// 0.20 s optimised against 0.15 and 0.07 s as exported, and every call after about 0.078 s
// either way; the denoiser, called every step, keeps the optimiser (4 % faster calls). On CUDA
// they follow model_backend.torchscript_gpu_optimize (as exported when it is false or "auto",
// optimised when it is true or fusion is on). Limit: after a start-up warm-up or the
// auto-tuner's probe (both call these modules outside the Batcher; on a CPU with the optimiser
// on) this scope changes nothing for that module in that process (see above).
// Module calls inside one are never replayed from CUDA graphs (stages/model/cuda_graph_calls.hpp):
// a graph of a VAE would pin gigabytes of activations for the process's life.
// Thread-safety: as TorchScriptOptimizerScope; active() is per thread (scopes nest).
class OncePerJobCalls {
 public:
  explicit OncePerJobCalls(std::string_view device);
  ~OncePerJobCalls();
  OncePerJobCalls(const OncePerJobCalls&) = delete;
  OncePerJobCalls& operator=(const OncePerJobCalls&) = delete;
  // Whether the calling thread is inside one.
  static bool active();

 private:
  TorchScriptOptimizerScope scope_;
};
c10::ScalarType parse_dtype(std::string_view name);     // "float32" | "float16" | "bfloat16"

class Module {
 public:
  virtual ~Module() = default;
  // Inputs are moved to the module's device (their dtypes are the caller's); outputs stay there.
  at::Tensor forward(const std::vector<at::Tensor>& inputs) const { return call("forward", inputs); }
  // The same for a named method (a package lists its components' methods in the manifest).
  // Error(invalid_argument) if the module has no such method.
  virtual at::Tensor call(std::string_view method, const std::vector<at::Tensor>& inputs) const = 0;
  virtual c10::Device device() const = 0;
  virtual c10::ScalarType dtype() const = 0;
  // Whether call(method) can be served (a compiled package may hold fewer methods than its
  // component's TorchScript file). Default: every method (call throws for an unknown one).
  virtual bool has_method(std::string_view /*method*/) const { return true; }
  // Whether call(method, inputs) is served for these inputs' shapes: a compiled model serves
  // only the shapes it was compiled for (the dims' ranges its package records). Default: has_method.
  virtual bool serves(std::string_view method, const std::vector<at::Tensor>& /*inputs*/) const {
    return has_method(method);
  }
  // Why `method` cannot run here although the module has it ("" when it can, or was not tried):
  // a compiled method's library that failed to load on its first use.
  virtual std::string unloadable(std::string_view /*method*/) const { return {}; }

  // Weight variants (LoRA, stages/model/lora.hpp). The module's parameters by full dotted name,
  // shared with it (never write into them: other jobs run on them). Default: none.
  virtual std::map<std::string, at::Tensor> parameters() const { return {}; }
  // A new module that shares everything with this one (methods, compiled graphs, every other
  // tensor) except the named parameters, which it holds as given (same shapes and dtypes,
  // on device()). This module is not changed, so jobs running on it are unaffected.
  // Error(invalid_argument) naming an unknown parameter or a wrong shape; Error(internal)
  // from a backend that cannot (the default).
  virtual std::shared_ptr<const Module> with_parameters(const std::map<std::string, at::Tensor>& replaced) const;
};

// The methods of a compiled (AOTInductor) module, or of the compiled module inside a component
// with a fallback, whose libraries are loaded so far (each loads on its first call); empty for
// any other module. Diagnostics and tests.
std::vector<std::string> aoti_loaded_methods(const Module& m);
// Loads every method of a compiled module now (Error(invalid_argument) naming the first that does
// not load); nothing for any other module.
void aoti_load_all(const Module& m);

using ModuleLoader =
    std::function<std::shared_ptr<const Module>(const std::filesystem::path& file, c10::Device, c10::ScalarType)>;
void register_model_backend(std::string name, ModuleLoader loader);
std::vector<std::string> model_backend_names();
std::shared_ptr<const Module> load_module(std::string_view backend, const std::filesystem::path& file,
                                          std::string_view device, c10::ScalarType dtype);

// Process-wide cache of loaded modules (load once per device, share across jobs).
class ModuleCache {
 public:
  static ModuleCache& instance();
  std::shared_ptr<const Module> get(std::string_view backend, const std::filesystem::path& file,
                                    std::string_view device, c10::ScalarType dtype);
  // The module serving `component` of `package` on `device` (component_backends.hpp): its
  // compiled file for the device type when `preference` is "auto" and that file is not refused
  // and loads (a method the compiled file does not hold, e.g. a VAE's streaming chunks, or a
  // call with shapes outside those it was compiled for, is served by the component's own file,
  // loaded on its first such call), else its own file (with the backend `preference` names, when not "auto"). Chosen once per (component file, device, preference) and
  // recorded (record_component_backend), a refusal logged; later calls reuse the choice.
  // Error(invalid_argument) when nothing can serve it.
  std::shared_ptr<const Module> get_component(const ModelPackage& package, const std::string& component,
                                              std::string_view device, std::string_view preference = "auto");
  std::size_t loads() const;  // how many actual loads happened (for tests and metrics)
  void clear();

 private:
  struct State;
  ModuleCache();
  std::shared_ptr<const Module> with_own_methods(std::shared_ptr<const Module> m, const std::filesystem::path& served,
                                                 const ModelComponent& c, std::string_view device, c10::ScalarType dtype,
                                                 const ComponentBackend& plan);  // whose fallback is recorded if a compiled method does not load
  std::shared_ptr<State> state_;
};

}  // namespace vgen
