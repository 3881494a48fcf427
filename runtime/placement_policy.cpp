#include "runtime/placement_policy.hpp"

#include "runtime/errors.hpp"
#include "runtime/registry.hpp"

#include <algorithm>
#include <optional>
#include <utility>

namespace vgen {

namespace {

bool is_resident(const DeviceStatus& d, const std::string& model) {
  return !model.empty() && std::find(d.resident_models.begin(), d.resident_models.end(),
                                     model) != d.resident_models.end();
}

class LeastLoadedPolicy final : public PlacementPolicy {
 public:
  std::size_t choose(const std::vector<DeviceStatus>& devices,
                     const std::vector<std::size_t>& candidates,
                     const PlacementRequest& request) override {
    const bool sticky = std::any_of(candidates.begin(), candidates.end(), [&](std::size_t i) {
      return is_resident(devices[i], request.model);
    });
    std::optional<std::size_t> best;
    for (std::size_t i : candidates) {  // ascending: strict "better" keeps the lowest index
      if (sticky && !is_resident(devices[i], request.model)) continue;
      if (!best || better(devices[i], devices[*best])) best = i;
    }
    return *best;
  }

 private:
  static bool better(const DeviceStatus& a, const DeviceStatus& b) {
    // Correctly rounded division: equal ratios (1/2, 2/4) compare equal.
    const double la = static_cast<double>(a.active) / static_cast<double>(a.max_concurrency);
    const double lb = static_cast<double>(b.active) / static_cast<double>(b.max_concurrency);
    return la != lb ? la < lb : a.leases_granted < b.leases_granted;
  }
};

class RoundRobinPolicy final : public PlacementPolicy {
 public:
  std::size_t choose(const std::vector<DeviceStatus>& devices,
                     const std::vector<std::size_t>& candidates,
                     const PlacementRequest&) override {
    const std::size_t n = devices.size();
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = (next_ + k) % n;
      if (std::binary_search(candidates.begin(), candidates.end(), i)) {
        next_ = (i + 1) % n;
        return i;
      }
    }
    return candidates.front();
  }

 private:
  std::size_t next_ = 0;
};

Registry<PlacementPolicyFactory>& placement_policies() {
  static Registry<PlacementPolicyFactory> registry(
      "placement policy",
      {{"least_loaded", [] { return std::make_unique<LeastLoadedPolicy>(); }},
       {"round_robin", [] { return std::make_unique<RoundRobinPolicy>(); }}});
  return registry;
}

}  // namespace

void register_placement_policy(std::string name, PlacementPolicyFactory factory) {
  if (!factory)
    throw_error(ErrorKind::invalid_argument, "placement policy '" + name + "' needs a factory");
  placement_policies().add(std::move(name), std::move(factory));
}

std::unique_ptr<PlacementPolicy> make_placement_policy(std::string_view name) {
  auto policy = placement_policies().get(name)();  // get() copies: the factory runs unlocked
  if (!policy)
    throw_error(ErrorKind::internal,
                "placement policy factory '" + std::string(name) + "' returned nothing");
  return policy;
}

std::vector<std::string> placement_policy_names() { return placement_policies().names(); }

}  // namespace vgen
