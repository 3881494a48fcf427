#include "stages/post/rife_interpolator.hpp"

#include "runtime/errors.hpp"
#include "stages/model/model_package.hpp"  // sha256_file
#include "stages/model/model_backend.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <c10/core/InferenceMode.h>

#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace vgen {

namespace {

[[noreturn]] void bad_package(const std::filesystem::path& file, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, "post package " + file.string() + ": " + what);
}

void check_factor(int factor) {
  if (factor != 2 && factor != 4) throw_error(ErrorKind::invalid_argument, "interpolate: must be 2 or 4 (got " + std::to_string(factor) + ")");
}

// One new frame: gap g (between inputs g and g + 1) at time k / factor; it lands at g x factor + k.
struct Item {
  int64_t gap;
  int k;
};

std::vector<Item> items_of(int64_t count, int factor) {
  std::vector<Item> items;
  for (int64_t g = 0; g + 1 < count; ++g)
    for (int k = 1; k < factor; ++k) items.push_back({g, k});
  return items;
}

}  // namespace

RifePackage read_rife_package(const std::filesystem::path& dir) {
  const auto file = dir / "manifest.json";
  std::ifstream in(file);
  if (!in) throw_error(ErrorKind::not_found, "post package: no " + file.string() + " (export one with python -m vgen_export.post --rife)");
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  const auto doc = boost::json::parse(text.str(), ec);
  if (ec || !doc.is_object()) bad_package(file, "not a JSON object");
  const auto& m = doc.get_object();
  auto str = [&](const char* key) {
    const auto* v = m.if_contains(key);
    if (!v || !v->is_string()) bad_package(file, std::string(key) + ": missing or not a string");
    return std::string(v->get_string());
  };
  if (str("kind") != "post") bad_package(file, "kind: must be \"post\"");
  if (str("variant") != "rife") bad_package(file, "variant: must be \"rife\" (got \"" + str("variant") + "\")");
  if (str("architecture") != "ifnet") bad_package(file, "architecture: must be \"ifnet\"");
  // 2x and 4x are made at t = 1/4, 1/2, 3/4 straight from the pair: the module must take any time.
  if (str("timesteps") != "any") bad_package(file, "timesteps: must be \"any\" (a model fixed at t = 0.5 is not supported)");
  RifePackage p;
  if (const auto* mult = m.if_contains("multiple")) {
    if (!mult->is_int64() || mult->get_int64() < 1) bad_package(file, "multiple: must be a positive integer");
    p.multiple = static_cast<int>(mult->get_int64());
  }
  const auto module = str("module");
  if (module.empty() || module.find('/') != std::string::npos || module.front() == '.') bad_package(file, "module: must be a file name");
  p.module = dir / module;
  if (!std::filesystem::is_regular_file(p.module)) throw_error(ErrorKind::not_found, "post package: no " + p.module.string());
  return p;
}

RifeInterpolator::RifeInterpolator(const PostOptions& options) : package_(read_rife_package(options.interpolate_model)), options_(options) {
  if (options.interpolate_batch < 1) throw_error(ErrorKind::invalid_argument, "post.interpolate_batch must be >= 1");
  identity_ = name() + "@" + sha256_file(package_.module);
}

at::Tensor RifeInterpolator::between(const at::Tensor& img0, const at::Tensor& img1, const at::Tensor& times,
                                     const std::string& device) const {
  const auto module = ModuleCache::instance().get("torchscript", package_.module, device, at::kFloat);
  const auto dev = module->device();
  return module->forward({img0.to(dev, at::kFloat), img1.to(dev, at::kFloat), times.to(dev, at::kFloat)});
}

at::Tensor RifeInterpolator::interpolate(const at::Tensor& frames, int factor, const std::string& device) const {
  check_factor(factor);
  if (frames.dim() != 4 || frames.size(1) != 3 || frames.size(0) < 1) throw_error(ErrorKind::invalid_argument, "interpolate: input must be [F, 3, H, W]");
  c10::InferenceMode guard;
  const int64_t count = frames.size(0);
  auto out = at::empty({(count - 1) * factor + 1, 3, frames.size(2), frames.size(3)}, frames.options().dtype(at::kFloat).device(at::kCPU));
  for (int64_t f = 0; f < count; ++f) out[f * factor].copy_(frames[f]);
  const auto items = items_of(count, factor);
  for (std::size_t i = 0; i < items.size(); i += options_.interpolate_batch) {
    const auto n = std::min<std::size_t>(options_.interpolate_batch, items.size() - i);
    std::vector<int64_t> a, b, at_index;
    std::vector<float> t;
    for (std::size_t j = i; j < i + n; ++j) {
      a.push_back(items[j].gap);
      b.push_back(items[j].gap + 1);
      t.push_back(static_cast<float>(items[j].k) / static_cast<float>(factor));
      at_index.push_back(items[j].gap * factor + items[j].k);
    }
    auto idx = [](const std::vector<int64_t>& v) { return at::tensor(at::ArrayRef<int64_t>(v), at::kLong); };
    const auto y = between(frames.index_select(0, idx(a)), frames.index_select(0, idx(b)), at::tensor(at::ArrayRef<float>(t)), device);
    out.index_copy_(0, idx(at_index), y.to(at::kCPU));
  }
  return out;
}

VideoFrames RifeInterpolator::run(const VideoFrames& in, int factor, const std::string& device) const {
  check_factor(factor);
  in.validate();
  c10::InferenceMode guard;
  const auto bytes = at::from_blob(const_cast<std::uint8_t*>(in.rgb.data()), {in.count, in.height, in.width, 3}, at::kByte);
  VideoFrames out = VideoFrames::allocate(in.width, in.height, (in.count - 1) * factor + 1, in.fps * factor);
  for (int f = 0; f < in.count; ++f) std::memcpy(out.frame(f * factor), in.frame(f), out.frame_bytes());  // the inputs, byte for byte
  const auto items = items_of(in.count, factor);
  // A batch converts only its own pairs to float: the memory is a batch's, not the clip's.
  for (std::size_t i = 0; i < items.size(); i += options_.interpolate_batch) {
    const auto n = std::min<std::size_t>(options_.interpolate_batch, items.size() - i);
    std::vector<int64_t> a, b;
    std::vector<float> t;
    for (std::size_t j = i; j < i + n; ++j) {
      a.push_back(items[j].gap);
      b.push_back(items[j].gap + 1);
      t.push_back(static_cast<float>(items[j].k) / static_cast<float>(factor));
    }
    auto frames = [&](const std::vector<int64_t>& v) {
      return bytes.index_select(0, at::tensor(at::ArrayRef<int64_t>(v), at::kLong)).permute({0, 3, 1, 2}).to(at::kFloat).div(255.0);
    };
    const auto y = between(frames(a), frames(b), at::tensor(at::ArrayRef<float>(t)), device);
    const auto rgb = y.permute({0, 2, 3, 1}).mul(255.0).round().clamp(0, 255).to(at::kCPU).to(at::kByte).contiguous();
    for (std::size_t j = 0; j < n; ++j)
      std::memcpy(out.frame(static_cast<int>(items[i + j].gap * factor + items[i + j].k)), rgb.data_ptr<std::uint8_t>() + j * out.frame_bytes(),
                  out.frame_bytes());
  }
  check_post_output(*this, in, factor, out);
  return out;
}

void register_rife_interpolator() {
  static std::once_flag once;
  std::call_once(once, [] {
    post_processors().add("rife", [](const PostOptions& o) { return std::make_shared<const RifeInterpolator>(o); });
  });
}

}  // namespace vgen
