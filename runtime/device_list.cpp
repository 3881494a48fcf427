#include "runtime/device_list.hpp"

#include "runtime/errors.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <set>
#include <utility>

namespace vgen {

namespace {

std::string normalise(std::string_view token) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!token.empty() && space(token.front())) token.remove_prefix(1);
  while (!token.empty() && space(token.back())) token.remove_suffix(1);
  std::string out(token);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::size_t> parse_index(std::string_view digits) {
  std::size_t value = 0;
  const auto* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || ec != std::errc{} || ptr != end) return std::nullopt;
  return value;
}

[[noreturn]] void invalid(std::string message) {
  throw Error(ErrorKind::invalid_argument, std::move(message));
}

}  // namespace

std::string_view to_string(DeviceKind kind) noexcept {
  return kind == DeviceKind::cuda ? "cuda" : "cpu";
}

std::vector<DeviceSpec> parse_device_list(std::string_view list, const CudaDiscovery& cuda,
                                          double memory_fraction,
                                          std::size_t cpu_concurrency, std::size_t cuda_concurrency) {
  if (!(memory_fraction > 0.0 && memory_fraction <= 1.0))
    invalid("device memory fraction must be in (0, 1], got " + std::to_string(memory_fraction));
  if (cpu_concurrency == 0) invalid("cpu concurrency must be at least 1");
  if (cuda_concurrency == 0) invalid("cuda concurrency (threads.per_gpu) must be at least 1");
  if (normalise(list).empty()) invalid("empty device list");

  std::optional<std::vector<CudaDeviceInfo>> discovered;
  const auto gpus = [&]() -> const std::vector<CudaDeviceInfo>& {
    if (!discovered) discovered = cuda ? cuda() : std::vector<CudaDeviceInfo>{};
    return *discovered;
  };
  const auto gpu_indices = [&] {
    std::string out;
    for (const auto& g : gpus()) out += (out.empty() ? "" : ", ") + std::to_string(g.index);
    return out.empty() ? std::string("none") : out;
  };

  // Expand entries first, then give bare "cpu" entries the lowest indices nobody named.
  struct Entry {
    DeviceKind kind;
    std::optional<std::size_t> index;  // nullopt: a bare "cpu"
    std::size_t total_memory;
    std::string token;
  };
  std::vector<Entry> entries;
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string token = normalise(list.substr(start, comma - start));
    start = comma + 1;
    if (token.empty()) invalid("empty entry in device list '" + std::string(list) + "'");
    if (token == "cuda" || (token == "auto" && !gpus().empty())) {
      if (gpus().empty()) invalid("no CUDA device found for '" + token + "'");
      for (const auto& g : gpus())
        if (g.index >= 0)
          entries.push_back(
              {DeviceKind::cuda, static_cast<std::size_t>(g.index), g.total_memory, token});
      continue;
    }
    if (token == "cpu" || token == "auto") {
      entries.push_back({DeviceKind::cpu, std::nullopt, 0, token});
      continue;
    }
    const std::string_view t(token);
    const auto n = parse_index(t.substr(std::min(t.find(':'), t.size() - 1) + 1));
    const bool is_cpu = t.starts_with("cpu:"), is_cuda = t.starts_with("cuda:");
    if (!n || !(is_cpu || is_cuda))
      invalid("unknown device '" + token + "' (expected cpu, cpu:N, cuda, cuda:N or auto)");
    std::size_t total_memory = 0;
    if (is_cuda) {
      const auto it = std::find_if(gpus().begin(), gpus().end(), [&](const CudaDeviceInfo& g) {
        return g.index >= 0 && static_cast<std::size_t>(g.index) == *n;
      });
      if (it == gpus().end())
        invalid("no CUDA device for '" + token + "' (found: " + gpu_indices() + ")");
      total_memory = it->total_memory;
    }
    entries.push_back({is_cpu ? DeviceKind::cpu : DeviceKind::cuda, n, total_memory, token});
  }

  std::set<std::pair<DeviceKind, std::size_t>> taken;
  for (const auto& e : entries) {
    if (e.index && !taken.insert({e.kind, *e.index}).second)
      invalid("device '" + std::string(to_string(e.kind)) + ":" + std::to_string(*e.index) +
              "' listed twice (entry '" + e.token + "')");
  }
  std::vector<DeviceSpec> specs;
  std::size_t next_cpu = 0;
  for (auto& e : entries) {
    if (!e.index) {
      while (taken.count({DeviceKind::cpu, next_cpu})) ++next_cpu;
      e.index = next_cpu++;
    }
    DeviceSpec spec;
    spec.id = std::string(to_string(e.kind)) + ":" + std::to_string(*e.index);
    spec.kind = e.kind;
    if (e.kind == DeviceKind::cpu) {
      spec.max_concurrency = cpu_concurrency;
    } else {
      spec.max_concurrency = cuda_concurrency;
    }
    if (e.kind == DeviceKind::cuda && e.total_memory > 0) {
      const long double budget = static_cast<long double>(e.total_memory) * memory_fraction;
      spec.memory_bytes = std::max<std::size_t>(1, static_cast<std::size_t>(budget));
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace vgen
