#include "stages/text/text_lookup.hpp"

#include <boost/json.hpp>

#include "runtime/errors.hpp"

namespace vgen {

namespace json = boost::json;

ContentKey text_embedding_key(const std::string& package_id, const std::string& device, const std::string& text) {
  return content_key("text_embedding", json::object{{"package", package_id}, {"device", device}, {"text", text}});
}

TextLookup::TextLookup(TtlCache<at::Tensor>* cache, std::string package_id, std::string device)
    : cache_(cache), package_id_(std::move(package_id)), device_(std::move(device)) {}

bool TextLookup::want(const std::string& text) {
  if (known_.count(text)) return true;
  if (cache_)
    if (auto found = cache_->get(text_embedding_key(package_id_, device_, text))) {
      known_.emplace(text, *found);
      return true;
    }
  known_.emplace(text, at::Tensor());
  misses_.push_back(text);
  return false;
}

void TextLookup::encode_misses(const Encode& encode) {
  if (misses_.empty()) return;
  auto encoded = encode(misses_);
  if (encoded.size() != misses_.size())
    throw_error(ErrorKind::internal, "text encoder returned " + std::to_string(encoded.size()) + " embeddings for " +
                                         std::to_string(misses_.size()) + " texts");
  for (std::size_t i = 0; i < misses_.size(); ++i) {
    auto& e = encoded[i];
    if (cache_)
      cache_->put(text_embedding_key(package_id_, device_, misses_[i]), e,
                  static_cast<std::size_t>(e.numel() * e.element_size()));
    known_[misses_[i]] = std::move(e);
  }
  misses_.clear();
}

const at::Tensor& TextLookup::get(const std::string& text) const {
  auto it = known_.find(text);
  if (it == known_.end() || !it->second.defined())
    throw_error(ErrorKind::internal, "text embedding asked for before it was looked up and encoded");
  return it->second;
}

}  // namespace vgen
