#include "stages/post/rife_interpolator.hpp"

#include "runtime/errors.hpp"
#include "stages/model/frame_bytes.hpp"
#include "stages/model/model_package.hpp"  // sha256_file
#include "stages/model/model_backend.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace vgen {

namespace {

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

// One call of the model: the first and second frame of each item, its time and its output position.
struct Batch {
  std::vector<int64_t> first, second, position;
  std::vector<float> time;
};

// The items of a clip of `count` frames, `size` at a time (the last batch may be shorter).
template <class F>
void for_each_batch(int64_t count, int factor, std::size_t size, F&& call) {
  const auto items = items_of(count, factor);
  for (std::size_t i = 0; i < items.size(); i += size) {
    Batch b;
    for (std::size_t j = i; j < std::min(i + size, items.size()); ++j) {
      b.first.push_back(items[j].gap);
      b.second.push_back(items[j].gap + 1);
      b.time.push_back(static_cast<float>(items[j].k) / static_cast<float>(factor));
      b.position.push_back(items[j].gap * factor + items[j].k);
    }
    call(b);
  }
}

at::Tensor long_tensor(const std::vector<int64_t>& v) { return at::tensor(at::ArrayRef<int64_t>(v), at::kLong); }

}  // namespace

RifePackage read_rife_package(const std::filesystem::path& dir) {
  const auto m = read_post_manifest(dir, "rife", "ifnet", "--rife");
  // 2x and 4x are made at t = 1/4, 1/2, 3/4 straight from the pair: the module must take any time.
  if (m.text("timesteps") != "any") m.bad("timesteps: must be \"any\" (a model fixed at t = 0.5 is not supported)");
  RifePackage p;
  if (const auto* mult = m.fields.if_contains("multiple")) {
    if (!mult->is_int64() || mult->get_int64() < 1) m.bad("multiple: must be a positive integer");
    p.multiple = static_cast<int>(mult->get_int64());
  }
  m.require_module();
  p.module = m.module;
  return p;
}

RifeInterpolator::RifeInterpolator(const PostOptions& options) : package_(read_rife_package(options.interpolate_model)), options_(options) {
  if (options.interpolate_batch < 1) throw_error(ErrorKind::invalid_argument, "post.interpolate_batch must be >= 1");
  identity_ = name() + "@" + sha256_file(package_.module) + "/batch=" + std::to_string(options.interpolate_batch);
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
  for_each_batch(count, factor, options_.interpolate_batch, [&](const Batch& b) {
    const auto y = between(frames.index_select(0, long_tensor(b.first)), frames.index_select(0, long_tensor(b.second)),
                           at::tensor(at::ArrayRef<float>(b.time)), device);
    out.index_copy_(0, long_tensor(b.position), y.to(at::kCPU));
  });
  return out;
}

VideoFrames RifeInterpolator::run(const VideoFrames& in, int factor, const std::string& device) const {
  check_factor(factor);
  in.validate();
  c10::InferenceMode guard;
  const auto bytes = at::from_blob(const_cast<std::uint8_t*>(in.rgb.data()), {in.count, in.height, in.width, 3}, at::kByte);
  VideoFrames out = VideoFrames::allocate(in.width, in.height, (in.count - 1) * factor + 1, in.fps * factor);
  for (int f = 0; f < in.count; ++f) std::memcpy(out.frame(f * factor), in.frame(f), out.frame_bytes());  // the inputs, byte for byte
  // A batch converts only its own pairs to float: the memory is a batch's, not the clip's.
  auto frames = [&](const std::vector<int64_t>& v) {
    return bytes.index_select(0, long_tensor(v)).permute({0, 3, 1, 2}).to(at::kFloat).div(255.0);
  };
  for_each_batch(in.count, factor, options_.interpolate_batch, [&](const Batch& b) {
    const auto y = between(frames(b.first), frames(b.second), at::tensor(at::ArrayRef<float>(b.time)), device);
    const auto rgb = to_frame_bytes(y.permute({0, 2, 3, 1}));
    for (std::size_t j = 0; j < b.position.size(); ++j)
      std::memcpy(out.frame(static_cast<int>(b.position[j])), rgb.data_ptr<std::uint8_t>() + j * out.frame_bytes(), out.frame_bytes());
  });
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
