// PlacementPolicy: which of the devices that can admit a request gets it. DevicePool keeps one
// policy per pool and asks it on every grant; policies are plug-ins chosen by name from a
// Registry (runtime/registry.hpp).
//
// Built in: "least_loaded" (sticky first: candidates where the model is resident win; then
// lowest active/max_concurrency; ties go to the fewest leases_granted, then the lowest index)
// and "round_robin" (the next candidate after the previous choice, cyclically).
// Thread-safety: the registry functions may be called from any thread. A policy instance is
// not synchronised: its pool calls it under the pool's mutex only. Nothing here blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

struct PlacementRequest {
  std::string model;            // what must be resident; empty = nothing to keep resident
  std::size_t model_bytes = 0;  // memory the model takes while resident
  std::size_t work_bytes = 0;   // memory the work takes while the lease is held
  // Devices that must not be chosen (e.g. one that just ran out of memory on this work). Use
  // with try_acquire: an acquire() that avoids every device would wait for good.
  std::vector<std::string> avoid;
};

// One device as a policy (and DevicePool::status) sees it.
struct DeviceStatus {
  std::string id;
  std::size_t active = 0;
  std::size_t max_concurrency = 0;
  std::size_t memory_used = 0;
  std::size_t memory_bytes = 0;               // 0 = unlimited
  std::vector<std::string> resident_models;  // least recently used first
  std::uint64_t leases_granted = 0;
  std::uint64_t evictions = 0;               // models evicted to make room
};

// Chooses among the devices that can admit a request. One instance per pool, always called
// under the pool's mutex, so an implementation may keep state without locking; it must not
// call into the pool. A choice outside `candidates` (or an exception) falls back to
// candidates.front(), so a faulty policy cannot wedge the pool.
struct PlacementPolicy {
  virtual ~PlacementPolicy() = default;
  // devices: every device, by index. candidates: indices (ascending, never empty) of the
  // devices that can admit the request now. Returns the chosen index into `devices`.
  virtual std::size_t choose(const std::vector<DeviceStatus>& devices,
                             const std::vector<std::size_t>& candidates,
                             const PlacementRequest& request) = 0;
};
using PlacementPolicyFactory = std::function<std::unique_ptr<PlacementPolicy>()>;

// Adds a policy under `name`: vgen::Error(invalid_argument) for an empty name, an empty
// factory or a name already registered ("placement policy 'x' is already registered").
void register_placement_policy(std::string name, PlacementPolicyFactory factory);

// A new instance of the policy `name`: vgen::Error(invalid_argument) listing the known names
// when it is unknown ("unknown placement policy 'x' (known: least_loaded, round_robin)"),
// Error(internal) if its factory returns nothing. The factory runs outside the registry's lock.
std::unique_ptr<PlacementPolicy> make_placement_policy(std::string_view name);

std::vector<std::string> placement_policy_names();  // sorted

}  // namespace vgen
