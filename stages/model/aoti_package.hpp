// AOTInductor packages (.pt2): a component compiled ahead of time by torch.export + AOTInductor
// (tools/vgen_export/aoti.py), one compiled model per method, named "<method>-model" (torch 2.11's
// loader takes the first model whose name starts with the one asked for: "forward" would find
// "forward_compact"),
// run by the "aoti" model backend (stages/model/model_backend.cpp) through
// torch::inductor::AOTIModelPackageLoader, without Python.
//
// A .pt2 is built for one device type and one torch version. aoti_refusal() says why a package
// cannot serve, naming the file, before its shared library is loaded: missing, size or sha256
// not the manifest's, not a readable .pt2, built for another device type or another torch
// version. The backend refuses the same way; ModuleCache::get_component then falls back to
// the component's TorchScript file.
// Thread-safety: safe from any thread. Blocking: reads (and hashes) the file.
// No LibTorch in this header: api/ reaches it through stages/model/component_backends.hpp.
#pragma once

#include "stages/model/model_package.hpp"

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

// Keys the exporter writes into each compiled model's metadata (tools/vgen_export/aoti.py).
inline constexpr const char* kAotiTorchKey = "vgen_torch";
inline constexpr const char* kAotiDeviceKey = "vgen_device";
inline constexpr const char* kAotiMethodsKey = "vgen_methods";  // "forward,forward_compact"
// Each model's inputs' dim ranges: inputs ';'-separated, each a ','-separated list of
// "dim:min:max" ("0:1:64,2:3:64;" : input 0's dims 0 and 2, nothing recorded for input 1).
inline constexpr const char* kAotiInputRangesKey = "vgen_input_ranges";

struct AotiDimRange {
  std::int64_t dim = 0, min = 0, max = 0;
};
// Error(invalid_argument) on a malformed value.
std::vector<std::vector<AotiDimRange>> parse_aoti_input_ranges(std::string_view value);

// "" when `c` can serve a device of `device_type` ("cpu", "cuda") with this process's LibTorch,
// as far as its size, checksum and metadata tell; otherwise the reason, naming the file.
// `verify_limit`: files up to this size are sha256-checked (as the package's own files).
std::string aoti_refusal(const CompiledComponent& c, std::string_view device_type,
                         std::uint64_t verify_limit = 256ull << 20);

// The compiled model that serves `method` in a .pt2.
std::string aoti_model_name(std::string_view method);

// The metadata of the compiled model of `method` in a .pt2; Error(invalid_argument) naming the
// file when it is not a readable AOTInductor package or holds no such model.
std::map<std::string, std::string> aoti_metadata(const std::filesystem::path& pt2, std::string_view method = "forward");

// "2.11.0" of "2.11.0+cu130": the part of a torch version that a compiled package must match.
std::string torch_release(std::string_view version);

// This process's LibTorch version ("2.11.0").
std::string libtorch_release();

}  // namespace vgen
