// LoraVariants: the LRU of merged modules (a base module with a LoRA set merged, issue 22), so
// that a popular set is merged once per device, within a byte budget.
//
// Choice: a merged variant is its own module instance (Module::with_parameters: it shares
// every untouched tensor and the compiled graphs with the base and holds only the merged
// copies of the touched ones), not the shared base written in place. The base is never
// modified, so groups without LoRA and groups with other sets run on the same device at the
// same time, nothing has to be held exclusively or restored, and "base restored bit-identical"
// holds by construction. The cost is the touched tensors' bytes per variant, which is what the
// budget counts.
//
// Ownership: entries hold their base and variant by shared_ptr; a caller keeps the variant it
// got for as long as it runs on it (a group keeps it for the whole loop, so an eviction frees
// nothing in use). Budget 0 turns caching off: every get() merges.
// Thread-safety: get() may be called from any thread; two threads asking for the same missing
// variant at once both merge and the first insert wins. Blocking: a miss merges (reads the
// LoRA files, computes): call it on a device thread. Not cancellable.
#pragma once

#include "stages/model/lora.hpp"

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace vgen {

struct LoraVariantStats {
  std::uint64_t merges = 0, hits = 0, evictions = 0;
  std::size_t bytes = 0, entries = 0;
};

class LoraVariants {
 public:
  explicit LoraVariants(std::size_t budget_bytes) : budget_(budget_bytes) {}

  // `base` with `set` merged; `set_key` identifies the set (lora_set_key). An empty set
  // returns `base`. Errors: those of merge_loras (Error(invalid_argument) naming file and key).
  std::shared_ptr<const Module> get(const std::shared_ptr<const Module>& base, const std::string& set_key,
                                    const std::vector<LoraChoice>& set);
  LoraVariantStats stats() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const Module> base, variant;
    std::size_t bytes = 0;
  };
  std::size_t budget_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
  LoraVariantStats stats_;
};

}  // namespace vgen
