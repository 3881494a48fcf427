#include "runtime/device_pool.hpp"

#include "runtime/errors.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

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
                                          std::size_t cpu_concurrency) {
  if (!(memory_fraction > 0.0 && memory_fraction <= 1.0))
    invalid("device memory fraction must be in (0, 1], got " + std::to_string(memory_fraction));
  if (cpu_concurrency == 0) invalid("cpu concurrency must be at least 1");
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
    } else if (e.total_memory > 0) {
      const long double budget = static_cast<long double>(e.total_memory) * memory_fraction;
      spec.memory_bytes = std::max<std::size_t>(1, static_cast<std::size_t>(budget));
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

// ---- placement policies -------------------------------------------------------------------

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

struct PolicyRegistry {
  PolicyRegistry() {
    factories.emplace("least_loaded", [] { return std::make_unique<LeastLoadedPolicy>(); });
    factories.emplace("round_robin", [] { return std::make_unique<RoundRobinPolicy>(); });
  }
  std::mutex mutex;
  std::map<std::string, PlacementPolicyFactory, std::less<>> factories;
};

PolicyRegistry& policy_registry() {
  static PolicyRegistry registry;  // built-ins are there before anyone can register
  return registry;
}

}  // namespace

void register_placement_policy(std::string name, PlacementPolicyFactory factory) {
  if (name.empty() || !factory)
    invalid("a placement policy needs a name and a factory");
  auto& r = policy_registry();
  std::lock_guard lock(r.mutex);
  if (!r.factories.emplace(name, std::move(factory)).second)
    invalid("placement policy '" + name + "' is already registered");
}

std::unique_ptr<PlacementPolicy> make_placement_policy(std::string_view name) {
  PlacementPolicyFactory factory;
  {
    auto& r = policy_registry();
    std::lock_guard lock(r.mutex);
    if (const auto it = r.factories.find(name); it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : placement_policy_names()) known += (known.empty() ? "" : ", ") + n;
    invalid("unknown placement policy '" + std::string(name) + "' (known: " + known + ")");
  }
  auto policy = factory();  // outside the lock: a factory may consult the registry
  if (!policy)
    throw Error(ErrorKind::internal,
                "placement policy factory '" + std::string(name) + "' returned nothing");
  return policy;
}

std::vector<std::string> placement_policy_names() {
  auto& r = policy_registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

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
