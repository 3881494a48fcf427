#include "stages/model/model_backend_options.hpp"

#include "runtime/errors.hpp"

#include <atomic>

namespace vgen {

namespace {
// Both fields in one atomic word (a reader never sees half of a change): two bits each,
// 0 "auto", 1 false, 2 true; fusion in the low bits.
std::atomic<unsigned> g_options{0};

unsigned encode(const std::optional<bool>& v) { return v ? (*v ? 2u : 1u) : 0u; }
std::optional<bool> decode(unsigned v) { return v == 0 ? std::nullopt : std::optional<bool>(v == 2); }
}  // namespace

void check_model_backend_options(const ModelBackendOptions& o) {
  if (o.torchscript_gpu_optimize == false && o.torchscript_gpu_fusion == true)
    throw_error(ErrorKind::invalid_argument,
                "model_backend.torchscript_gpu_optimize false with model_backend.torchscript_gpu_fusion true: fusion runs "
                "in TorchScript's optimiser (set fusion false or \"auto\", or optimize true or \"auto\")");
}

void fuse_when_auto(ModelBackendOptions& o) {
  if (!o.torchscript_gpu_fusion) o.torchscript_gpu_fusion = o.torchscript_gpu_optimize != false;
}

bool torchscript_optimizes(bool cuda, TorchScriptCalls calls, const ModelBackendOptions& o) {
  if (!cuda) return calls == TorchScriptCalls::every_step;
  if (o.torchscript_gpu_fusion == true) return true;
  return o.torchscript_gpu_optimize.value_or(true);
}

void set_model_backend_options(const ModelBackendOptions& o) {
  g_options.store(encode(o.torchscript_gpu_fusion) | encode(o.torchscript_gpu_optimize) << 2);
}

ModelBackendOptions model_backend_options() {
  const unsigned v = g_options.load();
  return ModelBackendOptions{.torchscript_gpu_fusion = decode(v & 3u), .torchscript_gpu_optimize = decode(v >> 2 & 3u)};
}

}  // namespace vgen
