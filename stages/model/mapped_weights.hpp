// Mapped weights: a TorchScript component whose parameters and buffers live in a safetensors
// file beside it ("split" packages, written by tools/vgen_export for large components). The
// TorchScript file then holds the code and empty placeholders; the weights are mapped from
// the safetensors file with mmap (MAP_PRIVATE) and the module's tensors are pointed at the
// mapping, with no copy: loading costs the header parse, and pages are read from the page
// cache when a step first touches them (as diffusers' safetensors loading does). A write
// to a mapped tensor copies that page (copy-on-write); the file is never changed.
//
// The TorchScript file names its weights file in the extra file `kWeightsExtraFile`
// ("vgen_weights"): a JSON object {"file": NAME, "sha256": HEX} with NAME a plain file name
// in the same folder (the sha256, of the weights file, makes the TorchScript file's own hash
// change with the weights; it is not re-checked at load, as for any large component).
//
// Ownership: each mapped tensor's storage holds a shared reference to the mapping; the file
// is unmapped when the last such tensor is gone. Thread-safety: free functions, no shared
// state. Blocking: file I/O (header read, mmap). Not cancellable.
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace vgen {

inline constexpr const char* kWeightsExtraFile = "vgen_weights";

// The weights file a TorchScript component names in its extra file `json` (the text of
// "vgen_weights"), resolved beside `module_file`; empty when `json` is empty (the weights are
// inside the TorchScript file). Error(invalid_argument) naming the module file when the JSON
// is malformed or the name is not a plain file name (no folders, no "..").
std::filesystem::path weights_file_for(const std::filesystem::path& module_file, const std::string& json);

// Maps `weights` (safetensors) and points every parameter and buffer of `module` (recursive,
// dotted names as in named_parameters) at its tensor there; on a non-CPU `device` the mapped
// tensor is copied to it instead. Every parameter and buffer must have an entry of the same
// dtype and every entry must be used; Error(invalid_argument) naming the file and the tensor
// otherwise. Returns the number of bytes mapped.
std::uint64_t attach_mapped_weights(torch::jit::Module& module, const std::filesystem::path& weights,
                                    c10::Device device);

}  // namespace vgen
