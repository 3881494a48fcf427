// TextLookup: a denoise group's texts resolved to embeddings, each distinct text once.
//
// Every family's prepare() does the same three-way lookup: the package's text-embedding cache,
// then a text an earlier job of the same group already asked for, then one encoder call for
// all the misses together; new embeddings go into the cache. This component is that lookup;
// a family supplies only its encoder call (how its encoder pads, masks and trims is its own).
//
// Ownership: holds the group's embeddings (tensors share storage with the cache's entries)
// for the length of one prepare(); borrows the cache, which must outlive it.
// Thread-safety: not thread-safe (one per prepare() call, on the compute thread); the cache is.
// Blocking/cancellation: encode_misses runs the family's encoder synchronously.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/Tensor.h>

#include "runtime/content_key.hpp"
#include "runtime/ttl_cache.hpp"

namespace vgen {

// The cache key of one text's embedding for a package on a device.
ContentKey text_embedding_key(const std::string& package_id, const std::string& device, const std::string& text);

class TextLookup {
 public:
  // One tensor per text, in the order given, each with its own storage (the cache keeps it).
  using Encode = std::function<std::vector<at::Tensor>(const std::vector<std::string>& texts)>;

  // `cache` may be null (no text cache); `package_id` and `device` name the cache entries.
  TextLookup(TtlCache<at::Tensor>* cache, std::string package_id, std::string device);

  // Asks for `text`. True when this ask costs no encoding: the cache had it, or an earlier ask
  // of this group did (that one pays for it). False: it is encoded by encode_misses.
  bool want(const std::string& text);

  // Encodes every text asked for and not found, in one call (none: no call), and caches them.
  // Throws vgen::Error (internal) when the encoder returns a different number of tensors.
  void encode_misses(const Encode& encode);

  // The embedding of a text asked for; valid after encode_misses. Throws vgen::Error
  // (internal) for a text never asked for or not yet encoded.
  const at::Tensor& get(const std::string& text) const;

  std::size_t misses() const { return misses_.size(); }

 private:
  TtlCache<at::Tensor>* cache_;
  std::string package_id_;
  std::string device_;
  std::map<std::string, at::Tensor> known_;  // a miss holds an undefined tensor until encoded
  std::vector<std::string> misses_;
};

}  // namespace vgen
