#include "stages/model/lora_variants.hpp"

#include <cstdio>

namespace vgen {

std::shared_ptr<const Module> LoraVariants::get(const std::shared_ptr<const Module>& base, const std::string& set_key,
                                                const std::vector<LoraChoice>& set) {
  if (set.empty()) return base;
  // The base's address is part of the key: an entry holds its base, so the address cannot be
  // reused by another module while the entry lives.
  char addr[32];
  std::snprintf(addr, sizeof addr, "%p|", static_cast<const void*>(base.get()));
  const std::string key = addr + set_key;
  {
    std::lock_guard lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->key == key) {
        entries_.splice(entries_.begin(), entries_, it);
        ++stats_.hits;
        return it->variant;
      }
  }
  auto merged = merge_loras(*base, set);
  std::size_t bytes = 0;
  for (const auto& [_, t] : merged) bytes += static_cast<std::size_t>(t.numel()) * t.element_size();
  auto variant = base->with_parameters(merged);
  std::lock_guard lock(mutex_);
  ++stats_.merges;
  for (const auto& e : entries_)
    if (e.key == key) return e.variant;  // merged meanwhile by another thread
  if (bytes > budget_) return variant;    // never fits: the caller holds it for its group only
  entries_.push_front(Entry{key, base, variant, bytes});
  stats_.bytes += bytes;
  while (stats_.bytes > budget_) {
    stats_.bytes -= entries_.back().bytes;
    entries_.pop_back();
    ++stats_.evictions;
  }
  return variant;
}

LoraVariantStats LoraVariants::stats() const {
  std::lock_guard lock(mutex_);
  auto s = stats_;
  s.entries = entries_.size();
  return s;
}

}  // namespace vgen
