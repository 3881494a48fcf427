#include "stages/model/attention_uses.hpp"

#include <spdlog/spdlog.h>

#include <mutex>
#include <set>
#include <tuple>

namespace vgen {

namespace {

using Key = std::tuple<std::string, std::string, std::string>;  // file, device, method

struct Record {
  std::mutex mutex;
  std::map<Key, std::set<std::string, std::less<>>> watched;  // shapes watched per key
  std::map<Key, AttentionUse> latest;
};

Record& record() {
  static Record r;
  return r;
}

Key key_of(const std::filesystem::path& file, std::string_view device, std::string_view method) {
  return {file.string(), std::string(device), std::string(method)};
}

}  // namespace

bool attention_watch_wanted(const std::filesystem::path& file, std::string_view device, std::string_view method,
                            std::string_view input_shape) {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  auto& shapes = r.watched[key_of(file, device, method)];
  if (shapes.size() >= kMaxWatchedShapes || shapes.find(input_shape) != shapes.end()) return false;
  shapes.emplace(input_shape);
  return true;
}

void attention_watch_abandoned(const std::filesystem::path& file, std::string_view device, std::string_view method,
                               std::string_view input_shape) {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  if (auto it = r.watched.find(key_of(file, device, method)); it != r.watched.end())
    if (auto shape = it->second.find(input_shape); shape != it->second.end()) it->second.erase(shape);
}

void record_attention_use(const AttentionUse& use) {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  auto [it, first] = r.latest.try_emplace(key_of(use.file, use.device, use.method), use);
  const bool changed = !first && it->second.kernels != use.kernels;
  if (!first) it->second = use;
  if (first || changed)
    spdlog::info("attention: {} {} on {} at {}: {}", use.file.filename().string(), use.method, use.device, use.input_shape,
                 describe_attention(use));
}

std::vector<AttentionUse> attention_uses() {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  std::vector<AttentionUse> out;
  for (const auto& [_, u] : r.latest) out.push_back(u);
  return out;
}

void clear_attention_uses() {
  auto& r = record();
  std::lock_guard lock(r.mutex);
  r.watched.clear();
  r.latest.clear();
}

std::string describe_attention(const AttentionUse& use) {
  if (use.sdpa_calls == 0 && use.kernels.empty()) return "no scaled-dot-product attention";
  std::string out;
  for (const auto& [kernel, calls] : use.kernels) out += (out.empty() ? "" : ", ") + kernel + " " + std::to_string(calls);
  return (out.empty() ? std::string("no kernel seen") : out) + " of " + std::to_string(use.sdpa_calls) + " attention calls";
}

}  // namespace vgen
