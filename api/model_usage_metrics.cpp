#include "api/model_usage_metrics.hpp"

namespace vgen {

ModelUsage current_model_usage() { return {component_backends(), attention_uses(), cuda_graph_uses()}; }

void ModelUsageMetrics::publish(const std::vector<ServedPackage>& models, const ModelUsage& usage) {
  std::lock_guard lock(mutex_);
  publish_backends(models, usage);
  publish_attention(models, usage);
  publish_graphs(models, usage);
}

// A component whose backend changed (a compiled method that did not load on its first call)
// has its earlier series set to 0.
void ModelUsageMetrics::publish_backends(const std::vector<ServedPackage>& models, const ModelUsage& usage) {
  for (const auto& m : models)
    for (const auto& b : usage.backends) {
      if (b.package != m.dir) continue;
      auto series = [&](const std::string& backend) -> Gauge& {
        return metrics_.gauge("vgen_model_backend", "Components loaded, by model, device and the backend that serves them",
                              {{"model", m.model}, {"component", b.component}, {"device", b.device}, {"backend", backend}});
      };
      auto& was = backends_[m.model + '\n' + b.component + '\n' + b.device];
      if (!was.empty() && was != b.backend) series(was).set(0);
      was = b.backend;
      series(b.backend).set(1);
    }
}

// Attention records name the module's file and LibTorch's device spelling ("cpu" is "cpu:0");
// they are matched to the component whose file that is.
void ModelUsageMetrics::publish_attention(const std::vector<ServedPackage>& models, const ModelUsage& usage) {
  auto same_device = [](const std::string& torch, const std::string& ours) {
    return torch == ours || (torch.find(':') == std::string::npos && torch + ":0" == ours);
  };
  for (const auto& m : models)
    for (const auto& b : usage.backends) {
      if (b.package != m.dir) continue;
      for (const auto& u : usage.attention) {
        if (u.file != b.file || !same_device(u.device, b.device)) continue;
        auto series = [&](const std::string& kernel) -> Gauge& {
          return metrics_.gauge("vgen_attention_calls",
                                "Scaled-dot-product attention kernel calls in one call of a component's method, by kernel",
                                {{"model", m.model}, {"component", b.component}, {"device", b.device}, {"method", u.method},
                                 {"kernel", kernel}});
        };
        auto& was = kernels_[m.model + '\n' + b.component + '\n' + b.device + '\n' + u.method];
        for (const auto& k : was)
          if (!u.kernels.count(k)) series(k).set(0);
        was.clear();
        for (const auto& [kernel, calls] : u.kernels) {
          series(kernel).set(calls);
          was.insert(kernel);
        }
      }
    }
}

void ModelUsageMetrics::publish_graphs(const std::vector<ServedPackage>& models, const ModelUsage& usage) {
  for (const auto& m : models)
    for (const auto& u : usage.graphs) {
      if (u.package != m.dir) continue;
      const std::pair<const char*, std::uint64_t> events[] = {
          {"capture", u.captures}, {"replay", u.replays}, {"capture_failure", u.failures}};
      for (const auto& [event, total] : events) {
        auto& was = graph_events_[m.model + '\n' + u.component + '\n' + u.device + '\n' + event];
        if (total <= was) continue;
        metrics_.counter("vgen_cuda_graph_events_total", "CUDA graphs of a component's calls (model_backend.cuda_graphs), by event",
                         {{"model", m.model}, {"component", u.component}, {"device", u.device}, {"event", event}})
            .inc(static_cast<double>(total - was));
        was = total;
      }
    }
}

}  // namespace vgen
