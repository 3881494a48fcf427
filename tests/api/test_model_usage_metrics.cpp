// The /metrics series of what serves each model's components, from given records: only the
// served packages' entries, a backend or kernel no longer in use set to 0, "cpu" matched to
// "cpu:0", CUDA-graph counters raised by the difference since the last publish.
#include "api/model_usage_metrics.hpp"

#include <doctest/doctest.h>

#include <sstream>

using namespace vgen;

namespace {
// The value of the one series of `name` whose line holds every one of `labels` ("k=\"v\""),
// or -1 when there is none; more than one is a failure.
double value(MetricsRegistry& metrics, const std::string& name, const std::vector<std::string>& labels) {
  std::istringstream lines(metrics.render_prometheus());
  double v = -1;
  int found = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    bool all = true;
    for (const auto& l : labels) all = all && line.find(l) != std::string::npos;
    if (!all) continue;
    v = std::stod(line.substr(line.rfind(' ') + 1));
    ++found;
  }
  CHECK_MESSAGE(found <= 1, name);
  return v;
}

const std::vector<ServedPackage> kServed{{"wan", "/pkgs/wan"}, {"ltx", "/pkgs/ltx"}};

ComponentBackend backend(const std::string& package, const std::string& component, const std::string& device,
                         const std::string& kind) {
  return {.package = package, .component = component, .device = device, .backend = kind,
          .file = package + "/" + component + (kind == "aoti" ? ".pt2" : ".pt"), .refused = ""};
}
}  // namespace

TEST_CASE("backends: one series of 1 per served component and device; a replaced backend goes to 0") {
  MetricsRegistry metrics;
  ModelUsageMetrics usage(metrics);
  ModelUsage u;
  u.backends = {backend("/pkgs/wan", "transformer", "cuda:0", "aoti"), backend("/pkgs/wan", "vae", "cuda:0", "torchscript"),
                backend("/pkgs/other", "transformer", "cuda:0", "aoti")};
  usage.publish(kServed, u);
  CHECK(value(metrics, "vgen_model_backend", {"model=\"wan\"", "component=\"transformer\"", "backend=\"aoti\""}) == 1);
  CHECK(value(metrics, "vgen_model_backend", {"model=\"wan\"", "component=\"vae\"", "backend=\"torchscript\""}) == 1);
  CHECK(value(metrics, "vgen_model_backend", {"model=\"ltx\""}) == -1);  // nothing of it loaded
  CHECK(metrics.render_prometheus().find("/pkgs/other") == std::string::npos);
  CHECK(value(metrics, "vgen_model_backend", {"component=\"transformer\"", "backend=\"aoti\""}) == 1);  // one series only

  // The compiled transformer did not load on its first call: TorchScript serves it now.
  u.backends[0] = backend("/pkgs/wan", "transformer", "cuda:0", "torchscript");
  usage.publish(kServed, u);
  CHECK(value(metrics, "vgen_model_backend", {"component=\"transformer\"", "backend=\"aoti\""}) == 0);
  CHECK(value(metrics, "vgen_model_backend", {"component=\"transformer\"", "backend=\"torchscript\""}) == 1);
}

TEST_CASE("attention: kernels of the component whose file ran them; a kernel no longer run goes to 0") {
  MetricsRegistry metrics;
  ModelUsageMetrics usage(metrics);
  ModelUsage u;
  u.backends = {backend("/pkgs/wan", "transformer", "cpu:0", "torchscript"), backend("/pkgs/ltx", "transformer", "cuda:1", "torchscript")};
  u.attention = {{.file = "/pkgs/wan/transformer.pt", .device = "cpu", .method = "forward", .input_shape = "[1]",
                  .kernels = {{"flash_cpu", 30}, {"math", 2}}, .sdpa_calls = 32},
                 {.file = "/pkgs/ltx/transformer.pt", .device = "cuda:0", .method = "forward", .input_shape = "[1]",
                  .kernels = {{"flash", 4}}, .sdpa_calls = 4}};  // another device than the one loaded
  usage.publish(kServed, u);
  const std::vector<std::string> wan{"model=\"wan\"", "device=\"cpu:0\"", "method=\"forward\""};
  auto with = [&](std::string kernel) {
    auto l = wan;
    l.push_back("kernel=\"" + kernel + "\"");
    return l;
  };
  CHECK(value(metrics, "vgen_attention_calls", with("flash_cpu")) == 30);
  CHECK(value(metrics, "vgen_attention_calls", with("math")) == 2);
  CHECK(value(metrics, "vgen_attention_calls", {"model=\"ltx\""}) == -1);

  u.attention[0].kernels = {{"flash_cpu", 32}};
  usage.publish(kServed, u);
  CHECK(value(metrics, "vgen_attention_calls", with("flash_cpu")) == 32);
  CHECK(value(metrics, "vgen_attention_calls", with("math")) == 0);
}

TEST_CASE("CUDA graphs: counters raised by what happened since the last publish, per served package") {
  MetricsRegistry metrics;
  ModelUsageMetrics usage(metrics);
  ModelUsage u;
  u.graphs = {{.package = "/pkgs/wan", .component = "transformer", .device = "cuda:0", .captures = 1, .replays = 5, .failures = 0},
              {.package = "/pkgs/other", .component = "transformer", .device = "cuda:0", .captures = 0, .replays = 0, .failures = 2}};
  usage.publish(kServed, u);
  const std::vector<std::string> wan{"model=\"wan\"", "component=\"transformer\"", "device=\"cuda:0\""};
  auto event = [&](std::string e) {
    auto l = wan;
    l.push_back("event=\"" + e + "\"");
    return value(metrics, "vgen_cuda_graph_events_total", l);
  };
  CHECK(event("capture") == 1);
  CHECK(event("replay") == 5);
  CHECK(event("capture_failure") == -1);  // none for wan; /pkgs/other is not served
  usage.publish(kServed, u);              // nothing new: no double count
  CHECK(event("replay") == 5);
  u.graphs[0].replays = 9;
  usage.publish(kServed, u);
  CHECK(event("replay") == 9);
  CHECK(event("capture") == 1);
}
