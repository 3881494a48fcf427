// Placement policies on their own: the registry (by name, duplicates, unknown names) and the
// built-in policies' choices over hand-made device snapshots.
#include "runtime/placement_policy.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using vgen::DeviceStatus;
using vgen::ErrorKind;
using vgen::PlacementRequest;

namespace {

struct Failure {
  ErrorKind kind = ErrorKind::internal;
  std::string message;  // empty: nothing was thrown
};
Failure failure_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const vgen::Error& e) {
    return {e.kind(), e.what()};
  }
  return {};
}

DeviceStatus device(std::size_t active, std::size_t slots, std::uint64_t granted = 0,
                    std::vector<std::string> resident = {}) {
  DeviceStatus d;
  d.id = "cpu:x";
  d.active = active;
  d.max_concurrency = slots;
  d.leases_granted = granted;
  d.resident_models = std::move(resident);
  return d;
}

PlacementRequest model(std::string name) { return {std::move(name), 0, 0}; }

struct Fixed : vgen::PlacementPolicy {
  explicit Fixed(std::size_t index) : index_(index) {}
  std::size_t choose(const std::vector<DeviceStatus>&, const std::vector<std::size_t>&,
                     const PlacementRequest&) override {
    return index_;
  }
  std::size_t index_;
};

}  // namespace

TEST_CASE("the built-ins are registered and unknown names list them") {
  const auto names = vgen::placement_policy_names();
  CHECK(std::is_sorted(names.begin(), names.end()));
  CHECK(std::find(names.begin(), names.end(), "least_loaded") != names.end());
  CHECK(std::find(names.begin(), names.end(), "round_robin") != names.end());
  CHECK(vgen::make_placement_policy("least_loaded") != nullptr);
  CHECK(vgen::make_placement_policy("round_robin") != nullptr);
  const auto unknown = failure_of([] { (void)vgen::make_placement_policy("fastest"); });
  CHECK(unknown.kind == ErrorKind::invalid_argument);
  // The Registry's wording, the same for every by-name variant.
  CHECK(unknown.message.starts_with("unknown placement policy 'fastest' (known: "));
  CHECK(unknown.message.find("least_loaded") != std::string::npos);
  CHECK(unknown.message.find("round_robin") != std::string::npos);
}

TEST_CASE("registering: duplicates, empty names and empty factories are refused") {
  const auto dup = failure_of([] {
    vgen::register_placement_policy("least_loaded", [] { return std::make_unique<Fixed>(0); });
  });
  CHECK(dup.kind == ErrorKind::invalid_argument);
  CHECK(dup.message == "placement policy 'least_loaded' is already registered");
  CHECK(failure_of([] { vgen::register_placement_policy("", [] { return std::make_unique<Fixed>(0); }); })
            .kind == ErrorKind::invalid_argument);
  const auto no_factory = failure_of([] { vgen::register_placement_policy("test_nothing", {}); });
  CHECK(no_factory.kind == ErrorKind::invalid_argument);
  CHECK(no_factory.message.find("test_nothing") != std::string::npos);
  CHECK(failure_of([] { (void)vgen::make_placement_policy("test_nothing"); }).kind ==
        ErrorKind::invalid_argument);  // the refused one was not added

  vgen::register_placement_policy("test_fixed_2", [] { return std::make_unique<Fixed>(2); });
  auto fixed = vgen::make_placement_policy("test_fixed_2");
  CHECK(fixed->choose({device(0, 1), device(0, 1), device(0, 1)}, {0, 1, 2}, model("")) == 2);
  const auto names = vgen::placement_policy_names();
  CHECK(std::find(names.begin(), names.end(), "test_fixed_2") != names.end());

  vgen::register_placement_policy("test_null", [] { return std::unique_ptr<vgen::PlacementPolicy>(); });
  const auto null = failure_of([] { (void)vgen::make_placement_policy("test_null"); });
  CHECK(null.kind == ErrorKind::internal);
  CHECK(null.message.find("test_null") != std::string::npos);
}

TEST_CASE("a factory may consult the registry (it runs outside the registry's lock)"
          * doctest::timeout(30)) {
  vgen::register_placement_policy("test_alias", [] { return vgen::make_placement_policy("round_robin"); });
  auto alias = vgen::make_placement_policy("test_alias");
  CHECK(alias->choose({device(0, 1), device(0, 1)}, {0, 1}, model("")) == 0);
  CHECK(alias->choose({device(0, 1), device(0, 1)}, {0, 1}, model("")) == 1);
}

TEST_CASE("concurrent registration and creation are safe" * doctest::timeout(60)) {
  for (int threads : {2, 4}) {
    CAPTURE(threads);
    std::atomic<int> made{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) {
          vgen::register_placement_policy(
              "test_c" + std::to_string(threads) + "_" + std::to_string(t) + "_" + std::to_string(i),
              [] { return std::make_unique<Fixed>(0); });
          if (vgen::make_placement_policy("least_loaded")) ++made;
        }
      });
    for (auto& th : pool) th.join();
    CHECK(made == threads * 50);
    CHECK(vgen::make_placement_policy("test_c" + std::to_string(threads) + "_0_49") != nullptr);
  }
}

TEST_CASE("least_loaded: resident model first, then load ratio, grants, index") {
  auto policy = vgen::make_placement_policy("least_loaded");
  // Sticky: the busier device that holds the model wins over an idle one.
  CHECK(policy->choose({device(0, 2), device(1, 2, 0, {"m"})}, {0, 1}, model("m")) == 1);
  // ...but only among candidates: a resident model on a full device does not count.
  CHECK(policy->choose({device(0, 2), device(1, 2, 0, {"m"})}, {0}, model("m")) == 0);
  // An unnamed request is never sticky.
  CHECK(policy->choose({device(0, 2, 5), device(1, 2, 0, {""})}, {0, 1}, model("")) == 0);
  // Lowest active / max_concurrency: 1/4 beats 1/2.
  CHECK(policy->choose({device(1, 2), device(1, 4)}, {0, 1}, model("x")) == 1);
  // Equal ratios (1/2, 2/4) tie; the fewest leases granted wins, then the lowest index.
  CHECK(policy->choose({device(1, 2, 7), device(2, 4, 3)}, {0, 1}, model("x")) == 1);
  CHECK(policy->choose({device(1, 2, 3), device(2, 4, 3)}, {0, 1}, model("x")) == 0);
  // Among several holders of the model, load decides.
  CHECK(policy->choose({device(1, 2, 0, {"m"}), device(0, 2), device(0, 2, 0, {"a", "m"})},
                       {0, 1, 2}, model("m")) == 2);
}

TEST_CASE("round_robin: the next candidate after the previous choice, cyclically") {
  auto policy = vgen::make_placement_policy("round_robin");
  const std::vector<DeviceStatus> three{device(0, 1), device(0, 1), device(0, 1)};
  std::vector<std::size_t> order;
  for (int i = 0; i < 4; ++i) order.push_back(policy->choose(three, {0, 1, 2}, model("")));
  CHECK(order == std::vector<std::size_t>{0, 1, 2, 0});
  CHECK(policy->choose(three, {0, 2}, model("")) == 2);  // 1 is not a candidate: skipped
  CHECK(policy->choose(three, {1, 2}, model("")) == 1);  // wraps around
  // Each instance keeps its own position.
  auto other = vgen::make_placement_policy("round_robin");
  CHECK(other->choose(three, {0, 1, 2}, model("")) == 0);
}
