#include "stages/exec/chunked_decode.hpp"

#include "runtime/errors.hpp"
#include "stages/model/model_backend.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <algorithm>

namespace vgen {

bool package_has_chunked_decode(const boost::json::object& manifest, const std::string& component) {
  const auto* comps = manifest.if_contains("components");
  const auto* c = comps && comps->is_object() ? comps->get_object().if_contains(component) : nullptr;
  const auto* methods = c && c->is_object() ? c->get_object().if_contains("methods") : nullptr;
  if (!methods || !methods->is_array()) return false;
  // A compiled decoder serves the whole clip, its TorchScript file the chunks: the two differ by
  // ~1e-7, enough to change a byte, so a watched job's file would differ from an unwatched one's.
  // Such a package decodes whole (the stream then starts at the encode).
  if (c->get_object().contains("compiled")) return false;
  std::vector<std::string> names;
  for (const auto& m : methods->get_array())
    if (m.is_string()) names.emplace_back(m.get_string());
  return has_chunked_decode(names);
}

bool has_chunked_decode(const std::vector<std::string>& methods) {
  auto has = [&](const char* name) { return std::find(methods.begin(), methods.end(), name) != methods.end(); };
  return has(kDecodeFirstPacked) && has(kDecodeStepPacked);
}

at::Tensor ChunkedDecoder::next(const at::Tensor& z) {
  const auto packed = chunks_ == 0 ? vae_.call(kDecodeFirstPacked, {z}) : vae_.call(kDecodeStepPacked, {z, state_});
  // The header is six numbers: one small copy to the host, whatever the module's device.
  const auto head = packed.narrow(0, 0, 6).to(at::kCPU, at::kDouble);
  const auto* h = head.data_ptr<double>();
  std::vector<std::int64_t> shape;
  std::int64_t numel = 1;
  for (int i = 1; i < 6; ++i) shape.push_back(static_cast<std::int64_t>(h[i])), numel *= shape.back();
  if (h[0] != 5 || numel <= 0 || 6 + numel >= packed.numel())
    throw_error(ErrorKind::internal, "chunked decode: the packed chunk " + std::to_string(chunks_) + " is malformed");
  // The state is a view of the packed vector: no copy; it keeps that one vector alive until the
  // next call replaces it.
  state_ = packed.narrow(0, 6 + numel, packed.numel() - 6 - numel);
  ++chunks_;
  // The frames are copied out: a view would keep this chunk's whole packed vector (its state,
  // two frames of every causal conv's input) alive for as long as the caller keeps the frames.
  return packed.narrow(0, 6, numel).view(shape).clone();
}

at::Tensor chunked_decode(const Module& vae, const at::Tensor& z, const std::function<void(const at::Tensor&)>& emit) {
  ChunkedDecoder decoder(vae);
  std::vector<at::Tensor> chunks;
  for (std::int64_t i = 0; i < z.size(2); ++i) {
    chunks.push_back(decoder.next(z.narrow(2, i, 1)));
    if (emit) emit(chunks.back());
  }
  return at::cat(chunks, 2);
}

}  // namespace vgen
