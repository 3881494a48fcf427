#include "stages/model/model_backend.hpp"

#include "runtime/errors.hpp"
#include "runtime/host_memory.hpp"
#include "runtime/registry.hpp"
#include "stages/model/mapped_weights.hpp"

#include "stages/model/aoti_library_cache.hpp"
#include "stages/model/aoti_package.hpp"
#include "stages/model/attention_watch.hpp"
#include "stages/model/component_backends.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <atomic>
#include <future>
#include <optional>
#include <map>
#include <mutex>
#include <set>

namespace vgen {

namespace fs = std::filesystem;

c10::Device parse_torch_device(std::string_view id) {
  const auto colon = id.find(':');
  const auto kind = id.substr(0, colon);
  int index = -1;
  if (colon != std::string_view::npos) {
    const auto digits = id.substr(colon + 1);
    if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string_view::npos)
      throw_error(ErrorKind::invalid_argument, "device: bad index in '" + std::string(id) + "'");
    index = std::stoi(std::string(digits));
  }
  if (kind == "cpu") return c10::Device(c10::kCPU);  // cpu:N is a replica of the one CPU device
  if (kind == "cuda") return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(std::max(index, 0)));
  throw_error(ErrorKind::invalid_argument, "device: unknown device '" + std::string(id) + "' (cpu[:N] or cuda:N)");
}

c10::ScalarType parse_dtype(std::string_view name) {
  if (name == "float32") return c10::kFloat;
  if (name == "float16") return c10::kHalf;
  if (name == "bfloat16") return c10::kBFloat16;
  throw_error(ErrorKind::invalid_argument, "dtype: unknown '" + std::string(name) + "' (float32, float16, bfloat16)");
}

std::shared_ptr<const Module> Module::with_parameters(const std::map<std::string, at::Tensor>&) const {
  throw_error(ErrorKind::internal, "this model backend cannot replace parameters (LoRA)");
}

namespace {

// A shallow copy of `m` (its own attribute slots, the same class type and so the same
// compiled methods) whose parameters named in `replaced` (relative to `prefix`) are swapped;
// only the submodules on a path to a replaced parameter are copied, every other slot is
// shared with `m`.
torch::jit::Module copy_with(const torch::jit::Module& m, const std::string& prefix,
                             const std::map<std::string, at::Tensor>& replaced) {
  torch::jit::Module out(m._ivalue()->copy());
  std::map<std::string, bool> children;  // child name -> has a replaced parameter below it
  for (auto it = replaced.lower_bound(prefix); it != replaced.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    const auto rest = it->first.substr(prefix.size());
    const auto dot = rest.find('.');
    if (dot == std::string::npos) {
      if (!m.hasattr(rest) || !m.attr(rest).isTensor())
        throw_error(ErrorKind::invalid_argument, "model has no parameter '" + it->first + "'");
      const auto base = m.attr(rest).toTensor();
      if (base.sizes() != it->second.sizes() || base.scalar_type() != it->second.scalar_type())
        throw_error(ErrorKind::invalid_argument, "parameter '" + it->first + "': replacement has another shape or dtype");
      out._ivalue()->setAttr(rest, it->second);
    } else {
      children[rest.substr(0, dot)] = true;
    }
  }
  for (const auto& [name, _] : children) {
    if (!m.hasattr(name) || !m.attr(name).isModule())
      throw_error(ErrorKind::invalid_argument, "model has no submodule '" + prefix + name + "'");
    out._ivalue()->setAttr(name, copy_with(m.attr(name).toModule(), prefix + name + ".", replaced)._ivalue());
  }
  return out;
}

class TorchScriptModule final : public Module {
 public:
  TorchScriptModule(torch::jit::Module m, fs::path file, c10::Device device, c10::ScalarType dtype)
      : module_(std::move(m)), file_(std::move(file)), device_(device), dtype_(dtype) {}

  at::Tensor call(std::string_view method, const std::vector<at::Tensor>& inputs) const override {
    // forward() is const on the module's state; TorchScript's method lookup is not const-qualified.
    auto& m = const_cast<torch::jit::Module&>(module_);
    auto found = m.find_method(std::string(method));
    if (!found) throw_error(ErrorKind::invalid_argument, "model has no method '" + std::string(method) + "'");
    c10::InferenceMode guard;
    const TorchScriptOptimizerScope optimizer(device_, TorchScriptCalls::every_step);  // as exported on CUDA when configured
    std::vector<c10::IValue> args;
    args.reserve(inputs.size());
    // Only the device changes here. Dtypes are the caller's: exported modules may keep some
    // inputs and submodules in float32 (e.g. Wan's timestep and time embedder in a bf16
    // package), so casting every floating input to the module's dtype would be wrong.
    for (const auto& t : inputs) args.emplace_back(t.to(device_));
    AttentionWatch watch(file_, device_, method, inputs);  // which attention kernels run (first call per shape)
    auto out = (*found)(std::move(args)).toTensor();
    watch.finish();
    return out;
  }
  c10::Device device() const override { return device_; }
  c10::ScalarType dtype() const override { return dtype_; }
  bool has_method(std::string_view method) const override {
    return const_cast<torch::jit::Module&>(module_).find_method(std::string(method)).has_value();
  }
  std::map<std::string, at::Tensor> parameters() const override {
    std::map<std::string, at::Tensor> out;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) out.emplace(p.name, p.value);
    return out;
  }
  std::shared_ptr<const Module> with_parameters(const std::map<std::string, at::Tensor>& replaced) const override {
    return std::make_shared<TorchScriptModule>(copy_with(module_, "", replaced), file_, device_, dtype_);
  }

 private:
  torch::jit::Module module_;
  fs::path file_;
  c10::Device device_;
  c10::ScalarType dtype_;
};

std::shared_ptr<const Module> load_torchscript(const fs::path& file, c10::Device device, c10::ScalarType dtype) {
  if (!fs::is_regular_file(file)) throw_error(ErrorKind::invalid_argument, "model file '" + file.string() + "' does not exist");
  // A CPU module's weights live in this process: a file larger than the memory left would get
  // the process killed mid-load, so it is refused first (a CUDA load only stages each tensor).
  if (device.is_cpu())
    check_fits_in_memory("model file '" + file.string() + "'", fs::file_size(file), available_memory_bytes());
  try {
    torch::jit::ExtraFilesMap extra{{kWeightsExtraFile, ""}};
    auto m = torch::jit::load(file.string(), device, extra);
    // A split component (stages/model/mapped_weights.hpp): the TorchScript file was only the code;
    // its weights are mapped, read when first used; one larger than memory would thrash.
    if (const auto weights = weights_file_for(file, extra[kWeightsExtraFile]); !weights.empty()) {
      if (device.is_cpu() && fs::is_regular_file(weights))
        check_fits_in_memory("model weights '" + weights.string() + "'", fs::file_size(weights),
                             available_memory_bytes());
      attach_mapped_weights(m, weights, device);
    }
    m.eval();  // the file's own parameter dtypes are kept: `dtype` describes them
    return std::make_shared<TorchScriptModule>(std::move(m), file, device, dtype);
  } catch (const c10::Error& e) {
    throw_error(ErrorKind::invalid_argument, "model file '" + file.string() + "' is corrupt or not TorchScript: " +
                                                 truncate_utf8(e.what_without_backtrace(), 300));
  }
}

// An AOTInductor package (stages/model/aoti_package.hpp): one loader per compiled model, named
// after the method it serves. Each loader unpacks the .pt2 into its own temporary folder.
// The compiled code checks no input shape: a method whose metadata records its inputs' dim
// ranges (kAotiInputRangesKey) refuses a call outside them here, as an error a caller may
// fall back on (MethodFallbackModule), instead of running code generated for other shapes.
class AotiModule final : public Module {
 public:
  // One compiled model of the package. Its loader is made on the method's first use, not with
  // the module: each loader unpacks the whole .pt2 and loads its model's library (about 0.37 s
  // for the large bench transformer's 290 MB, measured), and a job calls one of a transformer's
  // two methods (forward_compact when the package compacts the text context, else forward).
  struct Compiled {
    std::vector<std::vector<AotiDimRange>> ranges;  // per input, from the model's metadata; empty: not recorded
    std::string device_key;                          // AOTInductor's runner registry key ("cpu", "cuda")
    mutable std::mutex mutex;                        // guards the four below (first use)
    // The model's runner: loaded from the machine's unpacked copy (aoti_library_cache.hpp) when
    // the cache serves it, else through torch's loader (which unpacks into a temporary folder).
    mutable std::unique_ptr<torch::inductor::AOTIModelContainerRunner> own_runner;
    mutable std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
    mutable torch::inductor::AOTIModelContainerRunner* runner = nullptr;
    mutable std::string failed;  // why the model could not be loaded ("" until tried, or loaded)
  };
  AotiModule(fs::path file, std::map<std::string, Compiled, std::less<>> methods, c10::Device device, c10::ScalarType dtype)
      : file_(std::move(file)), methods_(std::move(methods)), device_(device), dtype_(dtype) {}

  at::Tensor call(std::string_view method, const std::vector<at::Tensor>& inputs) const override {
    const auto it = methods_.find(method);
    if (it == methods_.end()) throw_error(ErrorKind::invalid_argument, "compiled model has no method '" + std::string(method) + "'");
    if (auto why = outside_ranges(it->second.ranges, inputs); !why.empty())
      throw_error(ErrorKind::invalid_argument, "compiled model method '" + std::string(method) + "': " + why);
    auto& runner = loaded(it->first, it->second);
    c10::InferenceMode guard;
    std::vector<at::Tensor> args;
    args.reserve(inputs.size());
    // The compiled code was generated for dense inputs on its device, in the dtypes it was
    // exported with (the caller's, as for TorchScript).
    for (const auto& t : inputs) args.push_back(t.to(device_).contiguous());
    AttentionWatch watch(file_, device_, method, inputs);  // a compiled model may call none (Inductor's own kernels)
    auto out = runner.run(args);
    watch.finish();
    if (out.empty()) throw_error(ErrorKind::internal, "compiled model method '" + std::string(method) + "' returned nothing");
    return out.front();
  }
  c10::Device device() const override { return device_; }
  c10::ScalarType dtype() const override { return dtype_; }
  bool has_method(std::string_view method) const override { return methods_.find(method) != methods_.end(); }
  // Loads the method's model if need be: one that does not load is not served (a caller with the
  // component's own file falls back to it; call() names why).
  bool serves(std::string_view method, const std::vector<at::Tensor>& inputs) const override {
    const auto it = methods_.find(method);
    if (it == methods_.end() || !outside_ranges(it->second.ranges, inputs).empty()) return false;
    try {
      loaded(it->first, it->second);
      return true;
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::out_of_memory) throw;  // the device is full: no second copy of the weights
      return false;
    }
  }
  std::string unloadable(std::string_view method) const override {
    const auto it = methods_.find(method);
    if (it == methods_.end()) return {};
    std::lock_guard lock(it->second.mutex);
    return it->second.failed;
  }
  // Loads every method now (Error naming the first that does not load): for a component with
  // no file of its own to fall back to, whose failure should stop the start, not a job.
  void load_all() const {
    for (const auto& [name, c] : methods_) loaded(name, c);
  }
  std::vector<std::string> loaded_methods() const {
    std::vector<std::string> out;
    for (const auto& [name, c] : methods_) {
      std::lock_guard lock(c.mutex);
      if (c.runner) out.push_back(name);
    }
    return out;
  }

 private:
  // The method's runner, made once (a failure is remembered and repeated, not retried per call).
  torch::inductor::AOTIModelContainerRunner& loaded(const std::string& method, const Compiled& c) const {
    std::lock_guard lock(c.mutex);
    if (c.runner) return *c.runner;
    if (c.failed.empty()) {
      try {
        const auto index = device_.is_cuda() ? device_.index() : c10::DeviceIndex(-1);
        if (auto unpacked = AotiLibraryCache::process().unpack(file_, aoti_model_name(method))) {
          // As torch's loader makes it, from the unpacked files (metadata.json names the registry key).
          try {
            auto& runners = torch::inductor::getAOTIModelRunnerRegistry();
            const auto make = runners.find(c.device_key);
            if (make == runners.end()) throw std::runtime_error("no AOTInductor runner for device type '" + c.device_key + "'");
            c10::Device device(c.device_key);
            device.set_index(index);
            c.own_runner = make->second(unpacked->library.string(), 1, device.str(), unpacked->model_dir.string(),
                                        /*run_single_threaded=*/false);
            if (!unpacked->weights.empty()) c.own_runner->update_constant_buffer_from_blob(unpacked->weights.string());
            c.runner = c.own_runner.get();
          } catch (const c10::OutOfMemoryError&) {
            throw;
          } catch (const std::exception&) {
            // The unpacked copy went (another process pruned it) or is damaged: torch's own
            // loader decides from the .pt2 itself.
            c.own_runner.reset();
          }
        }
        if (!c.runner) {
          c.loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
              file_.string(), aoti_model_name(method), /*run_single_threaded=*/false, /*num_runners=*/1, index);
          c.runner = c.loader->get_runner();
        }
        return *c.runner;
      } catch (const c10::OutOfMemoryError& e) {
        // The device is full now (other jobs' memory), not the file broken: not remembered; the
        // Batcher's out-of-memory handling places or shrinks the group, and a later call retries.
        throw_error(ErrorKind::out_of_memory, "compiled model file '" + file_.string() + "' (method '" + method +
                                                  "'): out of memory while loading: " + truncate_utf8(e.what_without_backtrace(), 200));
      } catch (const std::exception& e) {
        const auto* c10 = dynamic_cast<const c10::Error*>(&e);
        c.failed = "compiled model file '" + file_.string() + "' (method '" + method + "') does not load: " +
                   truncate_utf8(c10 ? c10->what_without_backtrace() : e.what(), 300);
      }
    }
    throw_error(ErrorKind::invalid_argument, c.failed);
  }
  static std::string outside_ranges(const std::vector<std::vector<AotiDimRange>>& ranges, const std::vector<at::Tensor>& inputs) {
    for (std::size_t i = 0; i < ranges.size() && i < inputs.size(); ++i)
      for (const auto& r : ranges[i]) {
        const auto size = r.dim < inputs[i].dim() ? inputs[i].size(r.dim) : -1;
        if (size < r.min || size > r.max)
          return "input " + std::to_string(i) + " dim " + std::to_string(r.dim) + " is " + std::to_string(size) +
                 ", compiled for " + std::to_string(r.min) + ".." + std::to_string(r.max);
      }
    return {};
  }
  fs::path file_;
  std::map<std::string, Compiled, std::less<>> methods_;
  c10::Device device_;
  c10::ScalarType dtype_;
};

// The methods of a .pt2 are its models: the exporter names each after the method it compiles
// and lists them all in the metadata of "forward" (a package without the list has only forward).
std::vector<std::string> aoti_methods(const std::map<std::string, std::string>& forward_meta) {
  const auto it = forward_meta.find(kAotiMethodsKey);
  if (it == forward_meta.end() || it->second.empty()) return {"forward"};
  std::vector<std::string> out;
  std::string_view rest = it->second;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    if (auto name = rest.substr(0, comma); !name.empty()) out.emplace_back(name);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return out;
}

std::shared_ptr<const Module> load_aoti(const fs::path& file, c10::Device device, c10::ScalarType dtype) {
  if (!fs::is_regular_file(file)) throw_error(ErrorKind::invalid_argument, "compiled model file '" + file.string() + "' does not exist");
  if (device.is_cpu())
    check_fits_in_memory("compiled model file '" + file.string() + "'", fs::file_size(file), available_memory_bytes());
  const auto meta = aoti_metadata(file);  // refuses a file that is no .pt2
  const auto type = device.is_cuda() ? std::string("cuda") : std::string("cpu");
  const CompiledComponent self{.backend = "aoti", .file = file, .sha256 = {}, .bytes = fs::file_size(file), .torch = {}};
  // the size and sha256 against the manifest are ModuleCache::get_component's (it knows them)
  if (auto why = aoti_refusal(self, type, /*verify_limit=*/0); !why.empty()) throw_error(ErrorKind::invalid_argument, why);
  // Each method's metadata is read now (its input ranges); its library is loaded on first use.
  std::map<std::string, AotiModule::Compiled, std::less<>> methods;
  for (const auto& m : aoti_methods(meta)) {
    const auto own = m == "forward" ? meta : aoti_metadata(file, m);
    const auto ranges = own.find(kAotiInputRangesKey);
    methods[m].ranges = ranges == own.end() ? std::vector<std::vector<AotiDimRange>>{} : parse_aoti_input_ranges(ranges->second);
    const auto key = own.find("AOTI_DEVICE_KEY");
    methods[m].device_key = key == own.end() || key->second.empty() ? type : key->second;
  }
  if (methods.empty()) throw_error(ErrorKind::invalid_argument, "compiled model file '" + file.string() + "' holds no method vgen calls");
  return std::make_shared<AotiModule>(file, std::move(methods), device, dtype);
}

// A compiled component whose .pt2 holds only some of its methods or shapes (the exporter
// compiles what Inductor can and what pays: a Wan VAE's whole-clip decode from 3 latent frames,
// not its streaming chunks, whose state is parsed with data-dependent shapes): the other calls
// run on the component's own file, loaded (through the ModuleCache, once per process) on the
// first call that needs it.
//
// A compiled method whose library does not load (found on its first call: each loads lazily)
// is served by the own file from then on, and `refused` is told why, once per method
// (get_component records it for /metrics and logs it).
class MethodFallbackModule final : public Module {
 public:
  using Load = std::function<std::shared_ptr<const Module>()>;
  using Refused = std::function<void(const std::string& why)>;
  MethodFallbackModule(std::shared_ptr<const Module> compiled, Load load_own, Refused refused)
      : compiled_(std::move(compiled)), load_own_(std::move(load_own)), refused_(std::move(refused)) {}

  at::Tensor call(std::string_view method, const std::vector<at::Tensor>& inputs) const override {
    if (compiled_->serves(method, inputs)) return compiled_->call(method, inputs);
    if (auto why = compiled_->unloadable(method); !why.empty() && refused_) {
      std::unique_lock lock(mutex_);
      if (told_.insert(std::string(method)).second) {
        lock.unlock();
        refused_(why);
      }
    }
    return own()->call(method, inputs);
  }
  c10::Device device() const override { return compiled_->device(); }
  c10::ScalarType dtype() const override { return compiled_->dtype(); }
  bool has_method(std::string_view method) const override {
    return compiled_->has_method(method) || own()->has_method(method);
  }
  const Module& compiled() const { return *compiled_; }

 private:
  std::shared_ptr<const Module> own() const {
    std::lock_guard lock(mutex_);
    if (!own_) own_ = load_own_();
    return own_;
  }
  std::shared_ptr<const Module> compiled_;
  Load load_own_;
  Refused refused_;
  mutable std::set<std::string, std::less<>> told_;  // methods whose refusal was recorded (under mutex_)
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const Module> own_;
};

Registry<ModuleLoader>& registry() {
  static Registry<ModuleLoader> r("model backend", {{"torchscript", load_torchscript}, {"aoti", load_aoti}});
  return r;
}

}  // namespace

TorchScriptOptimizerScope::TorchScriptOptimizerScope(c10::Device device, TorchScriptCalls calls) {
  // Only ever turned off here: a thread that runs with it off (a bench's --jit-optimize 0)
  // stays so. Written only on a change (LibTorch's setter also checks its debug logging).
  if (torchscript_optimizes(device.is_cuda(), calls, model_backend_options()) || !torch::jit::getGraphExecutorOptimize()) return;
  torch::jit::setGraphExecutorOptimize(false);
  restore_ = true;
}

TorchScriptOptimizerScope::~TorchScriptOptimizerScope() {
  if (restore_) torch::jit::setGraphExecutorOptimize(true);
}

namespace {
thread_local int t_once_per_job_depth = 0;  // OncePerJobCalls open on this thread
}  // namespace

OncePerJobCalls::OncePerJobCalls(std::string_view device)
    : scope_(parse_torch_device(device), TorchScriptCalls::once_per_job) {
  ++t_once_per_job_depth;
}

OncePerJobCalls::~OncePerJobCalls() { --t_once_per_job_depth; }

bool OncePerJobCalls::active() { return t_once_per_job_depth > 0; }

void aoti_load_all(const Module& m) {
  if (const auto* a = dynamic_cast<const AotiModule*>(&m)) a->load_all();
}

std::vector<std::string> aoti_loaded_methods(const Module& m) {
  if (const auto* a = dynamic_cast<const AotiModule*>(&m)) return a->loaded_methods();
  if (const auto* f = dynamic_cast<const MethodFallbackModule*>(&m)) return aoti_loaded_methods(f->compiled());
  return {};
}

void register_model_backend(std::string name, ModuleLoader loader) { registry().add(std::move(name), std::move(loader)); }

std::vector<std::string> model_backend_names() { return registry().names(); }

std::shared_ptr<const Module> load_module(std::string_view backend, const fs::path& file, std::string_view device,
                                          c10::ScalarType dtype) {
  return registry().get(backend)(file, parse_torch_device(device), dtype);
}

struct ModuleCache::State {
  std::mutex mutex;
  std::map<std::string, std::shared_future<std::shared_ptr<const Module>>> entries;
  std::map<std::string, std::pair<std::string, fs::path>> choices;  // get_component: key -> (backend, file)
  // with_own_methods: compiled file + device -> (its module, that module with its component's own methods)
  std::map<std::string, std::pair<std::shared_ptr<const Module>, std::shared_ptr<const Module>>> with_own;
  std::size_t loads = 0;
};

ModuleCache::ModuleCache() : state_(std::make_shared<State>()) {}

ModuleCache& ModuleCache::instance() {
  static ModuleCache cache;
  return cache;
}

std::shared_ptr<const Module> ModuleCache::get(std::string_view backend, const fs::path& file, std::string_view device,
                                               c10::ScalarType dtype) {
  const std::string key = std::string(backend) + '\n' + fs::absolute(file).lexically_normal().string() + '\n' +
                          std::string(device) + '\n' + c10::toString(dtype);
  std::promise<std::shared_ptr<const Module>> mine;
  std::shared_future<std::shared_ptr<const Module>> result;
  bool loader = false;
  {
    std::lock_guard lock(state_->mutex);
    auto [it, inserted] = state_->entries.try_emplace(key);
    if (inserted) {
      it->second = mine.get_future().share();
      loader = true;
      ++state_->loads;
    }
    result = it->second;
  }
  if (loader) {  // single flight: one thread loads, the others wait for its result
    try {
      mine.set_value(load_module(backend, file, device, dtype));
    } catch (...) {
      mine.set_exception(std::current_exception());
      std::lock_guard lock(state_->mutex);
      state_->entries.erase(key);  // a failed load is retried next time
    }
  }
  return result.get();
}

// A compiled file serves what it holds; the component's own file (when it has one) the rest.
std::shared_ptr<const Module> ModuleCache::with_own_methods(std::shared_ptr<const Module> m, const fs::path& served,
                                                            const ModelComponent& c, std::string_view device,
                                                            c10::ScalarType dtype, const ComponentBackend& plan) {
  if (served == c.file || c.format == "aoti") return m;
  const std::string key = fs::absolute(served).lexically_normal().string() + '\n' + std::string(device);
  std::lock_guard lock(state_->mutex);
  auto& slot = state_->with_own[key];  // one wrapper per compiled module: callers may compare them
  if (slot.first != m)
    slot = {m, std::make_shared<MethodFallbackModule>(
                   m,
                   [this, backend = c.format, file = c.file, device = std::string(device), dtype] {
                     return get(backend, file, device, dtype);
                   },
                   [plan, backend = c.format, file = c.file](const std::string& why) {
                     auto fallen = plan;
                     fallen.backend = backend;
                     fallen.file = file;
                     fallen.refused = why;
                     record_component_backend(fallen);
                   })};
  return slot.second;
}

std::shared_ptr<const Module> ModuleCache::get_component(const ModelPackage& package, const std::string& component,
                                                         std::string_view device, std::string_view preference) {
  const auto& c = package.component(component);
  const std::string key = fs::absolute(c.file).lexically_normal().string() + '\n' + std::string(device) + '\n' +
                          std::string(preference);
  const auto dtype = parse_dtype(c.dtype);
  std::optional<std::pair<std::string, fs::path>> chosen;
  {
    std::lock_guard lock(state_->mutex);
    if (auto it = state_->choices.find(key); it != state_->choices.end()) chosen = it->second;
  }
  const ComponentBackend who{.package = package.dir, .component = component, .device = std::string(device)};
  if (chosen)  // (get takes the lock itself)
    return with_own_methods(get(chosen->first, chosen->second, device, dtype), chosen->second, c, device, dtype, who);
  auto plan = plan_component_backend(package, component, device, preference);
  std::shared_ptr<const Module> m;
  try {
    m = get(plan.backend, plan.file, device, dtype);
    // Nothing to fall back to: a method that does not load fails the start, not a job.
    if (c.format == "aoti") aoti_load_all(*m);
  } catch (const Error& e) {
    // The compiled file passed its checks but does not load: the component's own file serves.
    if (plan.file == c.file || e.kind() != ErrorKind::invalid_argument) throw;
    plan.refused = e.what();
    plan.backend = c.format;
    plan.file = c.file;
    m = get(plan.backend, plan.file, device, dtype);
  }
  record_component_backend(plan);
  {
    std::lock_guard lock(state_->mutex);
    state_->choices.emplace(key, std::pair{plan.backend, plan.file});
  }
  return with_own_methods(m, plan.file, c, device, dtype, plan);
}

std::size_t ModuleCache::loads() const {
  std::lock_guard lock(state_->mutex);
  return state_->loads;
}

void ModuleCache::clear() {
  std::lock_guard lock(state_->mutex);
  state_->entries.clear();
  state_->choices.clear();
  state_->with_own.clear();
}

}  // namespace vgen
