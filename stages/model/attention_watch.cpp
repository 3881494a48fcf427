#include "stages/model/attention_watch.hpp"

#include "stages/model/attention_uses.hpp"

#include <ATen/record_function.h>

#include <sstream>

namespace vgen {

namespace {

constexpr std::string_view kKernelPrefix = "aten::_scaled_dot_product_";
constexpr std::string_view kSdpa = "aten::scaled_dot_product_attention";

// What the watch on this thread has seen; active only while one watches.
struct Seen {
  bool active = false;
  std::map<std::string, int> kernels;
  int sdpa_calls = 0;
};
thread_local Seen t_seen;

std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
  if (!t_seen.active) return nullptr;
  const std::string_view name = fn.name();
  if (name == kSdpa) ++t_seen.sdpa_calls;
  else if (auto kernel = attention_kernel_of(name); !kernel.empty()) ++t_seen.kernels[kernel];
  return nullptr;
}

std::string shape_of(const std::vector<at::Tensor>& inputs) {
  if (inputs.empty() || !inputs.front().defined()) return "[]";
  std::ostringstream s;
  s << inputs.front().sizes();
  return s.str();
}

}  // namespace

std::string attention_kernel_of(std::string_view op) {
  if (op.substr(0, kKernelPrefix.size()) != kKernelPrefix) return {};
  const auto rest = op.substr(kKernelPrefix.size());
  if (rest == "flash_attention") return "flash";
  if (rest == "flash_attention_for_cpu") return "flash_cpu";
  if (rest == "efficient_attention") return "efficient";
  if (rest == "cudnn_attention") return "cudnn";
  if (rest == "attention_math" || rest == "attention_math_for_mps") return "math";
  return std::string(rest);
}

AttentionWatch::AttentionWatch(const std::filesystem::path& file, c10::Device device, std::string_view method,
                               const std::vector<at::Tensor>& inputs) {
  if (t_seen.active) return;  // nested: the outer watch counts
  auto shape = shape_of(inputs);
  auto dev = device.str();
  if (!attention_watch_wanted(file, dev, method, shape)) return;
  file_ = file;
  device_ = std::move(dev);
  method_ = std::string(method);
  shape_ = std::move(shape);
  t_seen = Seen{.active = true};
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_op).scopes({at::RecordScope::FUNCTION}));
}

AttentionWatch::~AttentionWatch() {
  if (!handle_) return;
  at::removeCallback(handle_);
  t_seen = Seen{};
  attention_watch_abandoned(file_, device_, method_, shape_);  // the call threw: the next one at this shape is watched
}

void AttentionWatch::finish() {
  if (!handle_) return;
  at::removeCallback(handle_);
  handle_ = 0;
  record_attention_use(AttentionUse{.file = file_, .device = device_, .method = method_, .input_shape = shape_,
                                    .kernels = std::move(t_seen.kernels), .sdpa_calls = t_seen.sdpa_calls});
  t_seen = Seen{};
}

}  // namespace vgen
