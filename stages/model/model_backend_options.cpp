#include "stages/model/model_backend_options.hpp"

#include "runtime/errors.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

namespace vgen {

namespace {
// The flags in one atomic word (a reader never sees half of a change): two bits each for
// fusion (low bits) and optimize, 0 "auto", 1 false, 2 true; then one bit for cuda_graphs.
std::atomic<unsigned> g_options{0};
// model_backend.attention: read when a Runtime starts, not per call, so a mutex will do.
std::mutex g_attention_mutex;
std::vector<std::string> g_attention;

unsigned encode(const std::optional<bool>& v) { return v ? (*v ? 2u : 1u) : 0u; }
std::optional<bool> decode(unsigned v) { return v == 0 ? std::nullopt : std::optional<bool>(v == 2); }
}  // namespace

const std::vector<std::string>& attention_backend_names() {
  // PyTorch 2.11's default order (at::Context's sdp_priority_order, less "overrideable", which
  // serves other device types).
  static const std::vector<std::string> names{"flash", "efficient", "math", "cudnn"};
  return names;
}

std::vector<std::string> attention_priority_order(const std::vector<std::string>& first) {
  std::vector<std::string> out = first;
  for (const auto& n : attention_backend_names())
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

void check_model_backend_options(const ModelBackendOptions& o) {
  const auto& known = attention_backend_names();
  for (std::size_t i = 0; i < o.attention.size(); ++i) {
    const auto& n = o.attention[i];
    if (std::find(known.begin(), known.end(), n) == known.end()) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
      throw_error(ErrorKind::invalid_argument,
                  "model_backend.attention: unknown attention backend '" + n + "' (known: " + names + ")");
    }
    if (std::find(o.attention.begin(), o.attention.begin() + static_cast<std::ptrdiff_t>(i), n) !=
        o.attention.begin() + static_cast<std::ptrdiff_t>(i))
      throw_error(ErrorKind::invalid_argument, "model_backend.attention: '" + n + "' is listed twice");
  }
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
  if (o.torchscript_gpu_optimize) return *o.torchscript_gpu_optimize;
  return calls == TorchScriptCalls::every_step;  // "auto": as on a CPU
}

void set_model_backend_options(const ModelBackendOptions& o) {
  g_options.store(encode(o.torchscript_gpu_fusion) | encode(o.torchscript_gpu_optimize) << 2 |
                  (o.cuda_graphs ? 1u : 0u) << 4);
  std::lock_guard lock(g_attention_mutex);
  g_attention = o.attention;
}

ModelBackendOptions model_backend_options() {
  const unsigned v = g_options.load();
  ModelBackendOptions o{.torchscript_gpu_fusion = decode(v & 3u), .torchscript_gpu_optimize = decode(v >> 2 & 3u)};
  o.cuda_graphs = (v >> 4 & 1u) != 0;
  std::lock_guard lock(g_attention_mutex);
  o.attention = g_attention;
  return o;
}

}  // namespace vgen
