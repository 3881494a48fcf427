#include "runtime/device_pool.hpp"

#include "runtime/errors.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>

namespace vgen {

namespace {

[[noreturn]] void invalid(std::string message) {
  throw Error(ErrorKind::invalid_argument, std::move(message));
}

}  // namespace

// ---- DeviceLease --------------------------------------------------------------------------

DeviceLease::DeviceLease(std::shared_ptr<detail::DevicePoolState> pool, std::size_t index,
                         std::string model, std::size_t held_bytes)
    : pool_(std::move(pool)), index_(index), model_(std::move(model)), held_bytes_(held_bytes) {}

DeviceLease& DeviceLease::operator=(DeviceLease&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::move(other.pool_);
    index_ = other.index_;
    model_ = std::move(other.model_);
    held_bytes_ = other.held_bytes_;
  }
  return *this;
}

const DeviceSpec& DeviceLease::device() const {
  if (!pool_) throw std::logic_error("DeviceLease::device() on an empty lease");
  return pool_->spec(index_);
}

void DeviceLease::release() noexcept {
  // Keep the state alive for the call even if this was the last reference to it.
  if (auto pool = std::move(pool_)) pool->release(index_, model_, held_bytes_);
}

// ---- pool state ---------------------------------------------------------------------------

namespace detail {

DevicePoolState::DevicePoolState(std::vector<DeviceSpec> devices, DevicePoolOptions options)
    : policy_(make_placement_policy(options.policy)), max_overtakes_(options.max_overtakes) {
  if (devices.empty()) invalid("a device pool needs a device");
  std::set<std::string> ids;
  for (const auto& d : devices) {
    if (d.id.empty()) invalid("a device needs an id");
    if (!ids.insert(d.id).second) invalid("duplicate device id '" + d.id + "'");
    if (d.max_concurrency == 0) invalid("device '" + d.id + "' needs max_concurrency >= 1");
  }
  devices_.reserve(devices.size());
  for (auto& spec : devices) {
    Device& d = devices_.emplace_back();
    d.spec = std::move(spec);
    if (auto* m = options.metrics) {
      const Labels l{{"device", d.spec.id}};
      d.active_gauge = &m->gauge("vgen_device_active", "Leases held on a device", l);
      d.memory_gauge = &m->gauge("vgen_device_memory_used_bytes",
                                 "Bytes of resident models and active work on a device", l);
      d.leases_counter = &m->counter("vgen_device_leases_total", "Leases granted", l);
      // Fixed for the pool's life: set once here, never touched under the mutex.
      m->gauge("vgen_device_slots", "Leases a device admits at once (max_concurrency)", l)
          .set(static_cast<double>(d.spec.max_concurrency));
      m->gauge("vgen_device_memory_budget_bytes", "A device's memory budget shared by its leases (0: unlimited)", l)
          .set(static_cast<double>(d.spec.memory_bytes));
      d.evictions_counter =
          &m->counter("vgen_device_evictions_total", "Idle models evicted to make room", l);
      publish_locked(d);
    }
  }
  if (auto* m = options.metrics) {
    queue_gauge_ = &m->gauge("vgen_device_queue_depth", "Acquires waiting for a device");
    publish_queue_locked();
  }
}

void DevicePoolState::validate(const PlacementRequest& request) const {
  const std::string what = request.model.empty() ? "an unnamed model"
                                                 : "model '" + request.model + "'";
  if (request.model_bytes > std::numeric_limits<std::size_t>::max() - request.work_bytes)
    invalid("memory request for " + what + " overflows");
  const std::size_t need = request.model_bytes + request.work_bytes;
  std::size_t largest = 0;
  for (const auto& d : devices_) {  // specs are immutable: no lock needed
    if (d.spec.memory_bytes == 0 || need <= d.spec.memory_bytes) return;
    largest = std::max(largest, d.spec.memory_bytes);
  }
  invalid("request for " + what + " needs " + std::to_string(need) + " bytes (model " +
          std::to_string(request.model_bytes) + " + work " + std::to_string(request.work_bytes) +
          "), more than any device's budget (largest " + std::to_string(largest) + ")");
}

// Grants to a request that is not queued (a new acquire or try_acquire), overtaking every
// queued waiter, unless the oldest has been overtaken too often. Overtake counts never grow
// along the queue (an older waiter was overtaken by everything that overtook a younger one),
// so the front waiter is the only one that can hold the line.
std::optional<DeviceLease> DevicePoolState::try_grant_locked(const PlacementRequest& request) {
  if (!pending_.empty() && pending_.front()->overtaken >= max_overtakes_) return std::nullopt;
  const auto index = place_locked(request);
  if (!index) return std::nullopt;
  for (auto& p : pending_) ++p->overtaken;
  return grant_locked(*index, request);
}

void DevicePoolState::enqueue_locked(std::shared_ptr<Pending> pending) {
  pending_.push_back(std::move(pending));
  publish_queue_locked();
}

// Serves waiters oldest first after a release: a waiter that cannot be placed is skipped
// unless it has been overtaken max_overtakes times, in which case it holds the line.
// Grants are returned, not completed: their leases must not die while the mutex is held.
std::vector<DevicePoolState::Grant> DevicePoolState::admit_locked() {
  std::vector<Grant> grants;
  std::size_t skipped = 0;  // pending_[0, skipped) could not be placed in this pass
  while (skipped < pending_.size() && slot_free_locked()) {
    Pending& p = *pending_[skipped];
    const auto index = place_locked(p.request);
    if (!index) {
      if (p.overtaken >= max_overtakes_) break;
      ++skipped;
      continue;
    }
    for (std::size_t k = 0; k < skipped; ++k) ++pending_[k]->overtaken;
    grants.push_back({p.waiter.pop_front(), grant_locked(*index, p.request)});
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(skipped));
  }
  publish_queue_locked();
  return grants;
}

void DevicePoolState::complete(std::vector<Grant>& grants) {
  for (auto& g : grants) std::move(g.waiter).complete(error_code{}, std::move(g.lease));
}

void DevicePoolState::cancel(std::uint64_t id) {
  std::unique_lock lock(mutex_);
  const auto it = std::find_if(pending_.begin(), pending_.end(),
                               [id](const auto& p) { return p->id == id; });
  if (it == pending_.end()) return;  // already granted or aborted
  auto waiter = (*it)->waiter.pop_front();
  // Only a waiter holding the line can have kept others from being served.
  const bool held_the_line = it == pending_.begin() && (*it)->overtaken >= max_overtakes_;
  pending_.erase(it);
  std::vector<Grant> grants;
  if (held_the_line) grants = admit_locked();
  publish_queue_locked();
  lock.unlock();
  std::move(waiter).complete(boost::asio::error::operation_aborted, DeviceLease{});
  complete(grants);
}

void DevicePoolState::release(std::size_t index, const std::string& model,
                              std::size_t held_bytes) noexcept {
  std::unique_lock lock(mutex_);
  Device& d = devices_[index];
  --d.active;
  d.work_bytes -= held_bytes;
  if (Resident* r = touch_locked(d, model)) --r->active;
  publish_locked(d);
  auto grants = admit_locked();
  lock.unlock();
  complete(grants);
}

void DevicePoolState::abort_waiters() {
  std::unique_lock lock(mutex_);
  std::vector<Waiters::Waiter> all;
  for (auto& p : pending_) all.push_back(p->waiter.pop_front());
  pending_.clear();
  publish_queue_locked();
  lock.unlock();
  for (auto& w : all) std::move(w).complete(boost::asio::error::operation_aborted, DeviceLease{});
}

// Devices that admit the request as things stand; failing that, devices that would after
// evicting idle models. The policy picks one; the chosen device then evicts what it must.
std::optional<std::size_t> DevicePoolState::place_locked(const PlacementRequest& request) {
  std::vector<std::size_t> candidates;
  bool evicting = false;
  for (bool with_eviction : {false, true}) {
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      const Device& d = devices_[i];
      if (std::find(request.avoid.begin(), request.avoid.end(), d.spec.id) != request.avoid.end()) continue;
      if (d.active < d.spec.max_concurrency && fits_locked(d, request, with_eviction))
        candidates.push_back(i);
    }
    evicting = with_eviction;
    if (!candidates.empty()) break;
  }
  if (candidates.empty()) return std::nullopt;
  const std::size_t chosen = choose_locked(candidates, request);
  if (evicting) evict_locked(devices_[chosen], request);
  return chosen;
}

std::size_t DevicePoolState::choose_locked(const std::vector<std::size_t>& candidates,
                                           const PlacementRequest& request) {
  std::vector<DeviceStatus> snapshot;
  snapshot.reserve(devices_.size());
  for (const auto& d : devices_) snapshot.push_back(status_locked(d));
  try {
    const std::size_t chosen = policy_->choose(snapshot, candidates, request);
    if (std::binary_search(candidates.begin(), candidates.end(), chosen)) return chosen;
  } catch (...) {
    // A faulty policy must not wedge the pool (this also runs inside lease destructors).
  }
  return candidates.front();
}

bool DevicePoolState::fits_locked(const Device& d, const PlacementRequest& request,
                                  bool evicting) const {
  const std::size_t budget = d.spec.memory_bytes;
  if (budget == 0) return true;
  std::size_t used = d.model_bytes + d.work_bytes;
  std::size_t need = request.work_bytes + request.model_bytes;
  for (const auto& r : d.resident) {
    if (!request.model.empty() && r.model == request.model)
      need = request.work_bytes;
    else if (evicting && r.active == 0)
      used -= r.bytes;
  }
  return need <= budget && used <= budget - need;
}

void DevicePoolState::evict_locked(Device& d, const PlacementRequest& request) {
  while (!fits_locked(d, request, false)) {
    const auto victim =  // the least recently used idle model
        std::find_if(d.resident.begin(), d.resident.end(), [&](const Resident& r) {
          return r.active == 0 && r.model != request.model;
        });
    if (victim == d.resident.end()) return;  // unreachable: the device fits after eviction
    d.model_bytes -= victim->bytes;
    d.resident.erase(victim);
    ++d.evictions;
    if (d.evictions_counter) d.evictions_counter->inc();
  }
}

DeviceLease DevicePoolState::grant_locked(std::size_t index, const PlacementRequest& request) {
  Device& d = devices_[index];
  std::size_t held = request.work_bytes;
  if (request.model.empty()) {
    held += request.model_bytes;  // nothing stays resident: the model is part of the work
  } else {
    Resident* r = touch_locked(d, request.model);
    if (!r) {
      r = &d.resident.emplace_back(Resident{request.model, request.model_bytes, 0});
      d.model_bytes += request.model_bytes;
    }
    ++r->active;
  }
  ++d.active;
  ++d.leases_granted;
  d.work_bytes += held;
  if (d.leases_counter) d.leases_counter->inc();
  publish_locked(d);
  return DeviceLease(shared_from_this(), index, request.model, held);
}

// Moves a resident model to the most recently used end of its device's list.
DevicePoolState::Resident* DevicePoolState::touch_locked(Device& d, const std::string& model) {
  const auto it = std::find_if(d.resident.begin(), d.resident.end(),
                               [&](const Resident& r) { return r.model == model; });
  if (model.empty() || it == d.resident.end()) return nullptr;
  std::rotate(it, std::next(it), d.resident.end());
  return &d.resident.back();
}

bool DevicePoolState::slot_free_locked() const {
  return std::any_of(devices_.begin(), devices_.end(),
                     [](const Device& d) { return d.active < d.spec.max_concurrency; });
}

DeviceStatus DevicePoolState::status_locked(const Device& d) const {
  DeviceStatus s;
  s.id = d.spec.id;
  s.active = d.active;
  s.max_concurrency = d.spec.max_concurrency;
  s.memory_used = d.model_bytes + d.work_bytes;
  s.memory_bytes = d.spec.memory_bytes;
  for (const auto& r : d.resident) s.resident_models.push_back(r.model);
  s.leases_granted = d.leases_granted;
  s.evictions = d.evictions;
  return s;
}

void DevicePoolState::publish_locked(const Device& d) {
  if (d.active_gauge) d.active_gauge->set(static_cast<double>(d.active));
  if (d.memory_gauge) d.memory_gauge->set(static_cast<double>(d.model_bytes + d.work_bytes));
}

void DevicePoolState::publish_queue_locked() {
  if (queue_gauge_) queue_gauge_->set(static_cast<double>(pending_.size()));
}

}  // namespace detail

// ---- DevicePool ---------------------------------------------------------------------------

DevicePool::DevicePool(std::vector<DeviceSpec> devices, DevicePoolOptions options)
    : state_(std::make_shared<detail::DevicePoolState>(std::move(devices), std::move(options))) {}

DevicePool::~DevicePool() { state_->abort_waiters(); }

std::optional<DeviceLease> DevicePool::try_acquire(const PlacementRequest& request) {
  state_->validate(request);
  std::lock_guard lock(state_->mutex_);
  return state_->try_grant_locked(request);
}

std::vector<DeviceStatus> DevicePool::status() const {
  std::lock_guard lock(state_->mutex_);
  std::vector<DeviceStatus> out;
  for (const auto& d : state_->devices_) out.push_back(state_->status_locked(d));
  return out;
}

std::size_t DevicePool::waiting() const {
  std::lock_guard lock(state_->mutex_);
  return state_->pending_.size();
}

std::size_t DevicePool::size() const noexcept { return state_->devices_.size(); }
const DeviceSpec& DevicePool::device(std::size_t index) const { return state_->spec(index); }

}  // namespace vgen
