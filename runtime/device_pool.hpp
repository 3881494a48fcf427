// DevicePool: decides which device (a CPU replica or a CUDA GPU) runs a piece of work, and
// hands out DeviceLeases that bound how much runs on each device at once.
//
// The pool owns no threads and does no compute: it is bookkeeping behind an awaitable acquire.
// Its devices are plain DeviceSpecs (runtime/device_list.hpp, which also parses `--devices`),
// and which admitting device wins is a PlacementPolicy's choice (runtime/placement_policy.hpp);
// both headers are included here, so users of the pool need only this one. Everything runs
// with simulated devices in tests.
//
// Contract
//  - A device admits a request when it has a free slot (active < max_concurrency) and the
//    request fits its memory budget: (model resident ? 0 : model_bytes) + work_bytes +
//    memory_used <= memory_bytes (memory_bytes 0 = unlimited). memory_used is the bytes of
//    the models resident on the device plus the work_bytes of its active leases. A request
//    with an empty model name keeps nothing resident: its model_bytes count as work memory.
//  - Models are sticky: a model stays resident after its leases end. When no device admits a
//    request as things stand, but some would after evicting resident models that no active
//    lease uses, the policy chooses among those and the chosen device evicts such idle models,
//    least recently used first, until the request fits. Active models are never evicted.
//  - A request that could not fit even on an empty device (model_bytes + work_bytes above
//    every device's budget) can never be served: acquire() and try_acquire() throw
//    vgen::Error(ErrorKind::invalid_argument) at once. invalid_argument, not out_of_memory,
//    because out_of_memory is retryable and retrying this request can never succeed.
//  - A model's size is the model_bytes of the request that made it resident.
//  - Which admitting device wins is up to a PlacementPolicy chosen by name from a registry.
//
// Waiting and fairness: acquire() waits until some device admits the request. Waiters are
// served in FIFO order, but one that cannot be placed does not block later ones that can
// (a large model must not stall small jobs). To bound starvation, a waiter may be overtaken
// at most DevicePoolOptions::max_overtakes times (by later waiters, acquire() or try_acquire());
// after that it holds the line: nothing new is granted until it is placed, which happens once
// enough leases end. max_overtakes = 0 gives strict FIFO. try_acquire() obeys the same rule.
//
// Ownership: DeviceSpecs are copied into the pool. A DeviceLease shares the pool's internal
// state, so a lease may outlive the DevicePool object (releasing it is then harmless). The
// MetricsRegistry, if any, must outlive the pool and its leases.
// Thread-safety: every member of DevicePool and DeviceLease may be called from any thread (one
// mutex); a single DeviceLease object is not itself synchronised. Granting happens under the
// mutex and completions are posted to each waiter's executor after it is released. Policies
// are called with the mutex held: they must not call back into the pool.
// Blocking: acquire() suspends the coroutine, never the thread; nothing else waits.
// Cancellation: a waiting acquire() is cancellable (terminal/partial/total) and then fails
// with operation_aborted, holding nothing. Destroying the DevicePool fails its waiting
// acquires with operation_aborted. As for every WaitList operation (runtime/wait_list.hpp),
// emit cancellation on the awaiting coroutine's executor.
#pragma once

#include "runtime/device_list.hpp"  // DeviceSpec, parse_device_list: users of the pool get them here
#include "runtime/metrics.hpp"
#include "runtime/placement_policy.hpp"  // PlacementRequest, DeviceStatus, the policy registry
#include "runtime/wait_list.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace vgen {

struct DevicePoolOptions {
  std::string policy = "least_loaded";
  // When set: gauges vgen_device_active{device}, vgen_device_memory_used_bytes{device},
  // vgen_device_queue_depth; counters vgen_device_leases_total{device},
  // vgen_device_evictions_total{device}. Series are keyed by device id, so pools sharing a
  // registry need distinct ids.
  MetricsRegistry* metrics = nullptr;
  std::size_t max_overtakes = 16;  // see "Waiting and fairness" above; 0 = strict FIFO
};

class DevicePool;
namespace detail {
class DevicePoolState;
}

// Move-only ownership of one slot on one device. Releasing (destructor or release()) returns
// the slot and the work memory; the model stays resident. device() needs a held lease.
class DeviceLease {
 public:
  DeviceLease() = default;
  DeviceLease(DeviceLease&&) noexcept = default;
  DeviceLease& operator=(DeviceLease&& other) noexcept;
  DeviceLease(const DeviceLease&) = delete;
  DeviceLease& operator=(const DeviceLease&) = delete;
  ~DeviceLease() { release(); }

  const DeviceSpec& device() const;  // throws std::logic_error on an empty lease
  std::size_t index() const noexcept { return index_; }
  const std::string& model() const noexcept { return model_; }
  explicit operator bool() const noexcept { return pool_ != nullptr; }
  void release() noexcept;

 private:
  friend class detail::DevicePoolState;
  DeviceLease(std::shared_ptr<detail::DevicePoolState> pool, std::size_t index,
              std::string model, std::size_t held_bytes);

  std::shared_ptr<detail::DevicePoolState> pool_;
  std::size_t index_ = 0;
  std::string model_;
  std::size_t held_bytes_ = 0;  // work memory returned on release
};

namespace detail {

// The pool's shared state; an implementation detail of DevicePool (see device_pool.cpp).
class DevicePoolState : public std::enable_shared_from_this<DevicePoolState> {
 public:
  using error_code = boost::system::error_code;
  using Signature = void(error_code, DeviceLease);

  DevicePoolState(std::vector<DeviceSpec> devices, DevicePoolOptions options);

  template <class H>
  void start_acquire(H&& handler, PlacementRequest request) {
    std::unique_lock lock(mutex_);
    std::optional<DeviceLease> lease = try_grant_locked(request);
    if (lease) {
      lock.unlock();
      boost::asio::post(
          boost::asio::append(std::forward<H>(handler), error_code{}, std::move(*lease)));
      return;
    }
    auto pending = std::make_shared<Pending>();
    pending->pool = weak_from_this();
    pending->id = ++last_id_;
    pending->request = std::move(request);
    pending->waiter.push(std::forward<H>(handler), std::monostate{},
                         std::weak_ptr<Pending>(pending));
    enqueue_locked(std::move(pending));
  }

  void validate(const PlacementRequest& request) const;  // throws if it can never fit
  void cancel(std::uint64_t id);  // called from a waiter's cancellation slot
  void release(std::size_t index, const std::string& model, std::size_t held_bytes) noexcept;
  void abort_waiters();
  const DeviceSpec& spec(std::size_t index) const { return devices_.at(index).spec; }

 private:
  friend class vgen::DevicePool;

  struct Resident {
    std::string model;
    std::size_t bytes = 0;
    std::size_t active = 0;  // leases using it: never evicted while > 0
  };
  struct Device {
    DeviceSpec spec;  // immutable after construction: read without the mutex
    std::size_t active = 0;
    std::size_t model_bytes = 0;     // resident models
    std::size_t work_bytes = 0;      // active leases
    std::vector<Resident> resident;  // least recently used (granted or released) first
    std::uint64_t leases_granted = 0;
    std::uint64_t evictions = 0;
    Gauge* active_gauge = nullptr;
    Gauge* memory_gauge = nullptr;
    Counter* leases_counter = nullptr;
    Counter* evictions_counter = nullptr;
  };
  using Waiters = WaitList<std::monostate, Signature>;
  // One queued acquire. Each has its own single-entry WaitList and the FIFO order lives in
  // pending_: waiters leave from the middle (skipped heads, cancellation), and erasing from
  // the middle of a WaitList move-assigns asio::any_completion_handler, which recurses
  // without end in Boost 1.81 (its operator= copies from an lvalue through the wrapping
  // constructor). Pending is the Owner its waiter's cancellation slot reaches.
  struct Pending {
    void cancel(std::uint64_t) const {
      if (auto p = pool.lock()) p->cancel(id);
    }
    std::weak_ptr<DevicePoolState> pool;
    std::uint64_t id = 0;
    PlacementRequest request;
    std::size_t overtaken = 0;
    Waiters waiter;  // exactly one entry while queued
  };
  struct Grant {
    Waiters::Waiter waiter;
    DeviceLease lease;
  };

  std::optional<DeviceLease> try_grant_locked(const PlacementRequest& request);
  void enqueue_locked(std::shared_ptr<Pending> pending);
  std::vector<Grant> admit_locked();
  static void complete(std::vector<Grant>& grants);
  std::optional<std::size_t> place_locked(const PlacementRequest& request);
  std::size_t choose_locked(const std::vector<std::size_t>& candidates,
                            const PlacementRequest& request);
  bool fits_locked(const Device& device, const PlacementRequest& request, bool evicting) const;
  void evict_locked(Device& device, const PlacementRequest& request);
  DeviceLease grant_locked(std::size_t index, const PlacementRequest& request);
  static Resident* touch_locked(Device& device, const std::string& model);
  bool slot_free_locked() const;
  DeviceStatus status_locked(const Device& device) const;
  void publish_locked(const Device& device);
  void publish_queue_locked();

  mutable std::mutex mutex_;
  std::vector<Device> devices_;
  std::unique_ptr<PlacementPolicy> policy_;
  std::size_t max_overtakes_;
  std::deque<std::shared_ptr<Pending>> pending_;  // oldest first
  std::uint64_t last_id_ = 0;
  Gauge* queue_gauge_ = nullptr;
};

}  // namespace detail

class DevicePool {
 public:
  // Throws vgen::Error(invalid_argument) for an empty device list, an empty or duplicate id,
  // max_concurrency 0 or an unknown policy name.
  explicit DevicePool(std::vector<DeviceSpec> devices, DevicePoolOptions options = {});
  ~DevicePool();  // fails waiting acquires with operation_aborted; leases stay valid
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // Completion void(error_code, DeviceLease): waits until some device admits `request`
  // (see "Waiting and fairness"). Throws vgen::Error(invalid_argument) before starting if the
  // request can never fit. On cancellation: operation_aborted and an empty lease.
  template <class Token = boost::asio::use_awaitable_t<>>
  auto acquire(PlacementRequest request, Token&& token = {}) {
    state_->validate(request);
    return boost::asio::async_initiate<Token, detail::DevicePoolState::Signature>(
        [st = state_](auto handler, PlacementRequest r) {
          st->start_acquire(std::move(handler), std::move(r));
        },
        token, std::move(request));
  }

  // Never waits: a lease if a device admits the request now (and no starved waiter holds
  // the line), else nullopt. Throws like acquire() for a request that can never fit.
  std::optional<DeviceLease> try_acquire(const PlacementRequest& request);

  std::vector<DeviceStatus> status() const;  // a consistent snapshot, by device index
  std::size_t waiting() const;               // acquires queued
  std::size_t size() const noexcept;
  const DeviceSpec& device(std::size_t index) const;  // throws std::out_of_range

 private:
  std::shared_ptr<detail::DevicePoolState> state_;
};

}  // namespace vgen
