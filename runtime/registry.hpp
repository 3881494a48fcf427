// vgen::Registry<T>: the one way variants are chosen by name — schedulers, model backends,
// placement policies, media writers, model families and job stores each keep one Registry of their
// factories.
//
//   Registry<SchedulerFactory>& schedulers();           // a function-local static per kind
//   schedulers().add("DDIMScheduler", &DDIM::make);     // Error(invalid_argument) if taken
//   auto make = schedulers().get("DDIMScheduler");      // Error(invalid_argument) naming the
//                                                        // known names if unknown
//
// `kind` names what the registry holds ("scheduler", "model family", ...) in its errors:
//   "unknown scheduler 'X' (known: A, B)", "scheduler 'A' is already registered".
// Built-ins are passed to the constructor, so they are present before anyone can look up.
// Thread-safety: every member may be called from any thread; get() returns a copy of the
// entry, so a factory runs outside the registry's lock (it may consult the registry).
// Entries are never removed.
#pragma once

#include "runtime/errors.hpp"

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vgen {

namespace detail {
// The registries' errors, one wording for every kind (runtime/registry.cpp).
[[noreturn]] void throw_unnamed(const std::string& kind);
[[noreturn]] void throw_duplicate(const std::string& kind, const std::string& name);
[[noreturn]] void throw_unknown(const std::string& kind, std::string_view name, const std::vector<std::string>& known);
std::string join_names(const std::vector<std::string>& names);  // "A, B, C"
}  // namespace detail

template <class T>
class Registry {
 public:
  explicit Registry(std::string kind, std::vector<std::pair<std::string, T>> builtins = {}) : kind_(std::move(kind)) {
    for (auto& [name, entry] : builtins) add(std::move(name), std::move(entry));
  }
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Adds `entry` under `name`. Error(invalid_argument) for an empty name or a taken one.
  void add(std::string name, T entry) {
    if (name.empty()) detail::throw_unnamed(kind_);
    std::lock_guard lock(mutex_);
    if (entries_.count(name)) detail::throw_duplicate(kind_, name);
    entries_.emplace(std::move(name), std::move(entry));
  }

  // The entry under `name`; Error(invalid_argument) naming the known ones if there is none.
  T get(std::string_view name) const {
    if (auto found = find(name)) return std::move(*found);
    detail::throw_unknown(kind_, name, names());
  }

  std::optional<T> find(std::string_view name) const {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(name);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  bool contains(std::string_view name) const { return find(name).has_value(); }

  // Registered names, sorted.
  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& kv : entries_) out.push_back(kv.first);
    return out;
  }

  // "A, B, C": the names for error messages.
  std::string known() const { return detail::join_names(names()); }

  const std::string& kind() const noexcept { return kind_; }

 private:
  const std::string kind_;
  mutable std::mutex mutex_;
  std::map<std::string, T, std::less<>> entries_;
};

}  // namespace vgen
