// LoRA files and merging them into a loaded module's weights (issue 22).
//
// Layouts read (per key, after one of the prefixes "transformer.", "diffusion_model.",
// "model.diffusion_model.", "base_model.model."):
//   diffusers/PEFT        blocks.N.attn1.to_q.lora_A.weight / lora_B.weight  (alpha: the
//                         `lora_adapter_metadata` "transformer.lora_alpha" of the header, else
//                         a per-layer `.alpha` tensor, else the rank)
//   original/ComfyUI Wan  blocks.N.self_attn.q.lora_down.weight / lora_up.weight, `.alpha`,
//                         and full deltas `.diff` (the weight) / `.diff_b` (the bias); the
//                         original layer names are renamed to diffusers' (kLayerRenames in
//                         lora.cpp: self_attn.q -> attn1.to_q, ffn.0 -> ffn.net.0.proj, ...).
// A layer path P is found in the module's parameters as the one name equal to P.weight or
// ending in ".P.weight" (the exported Wan transformer prefixes diffusers' names with
// "transformer."). Merging: W' = W + sum_i scale_i * up_i @ down_i * alpha_i / rank_i (+ the
// full deltas times scale_i), computed in float32 on the module's device and stored in W's
// dtype. A merged module is a new module that shares every untouched tensor with the base
// (Module::with_parameters), so the base is never written and needs no restoring.
//
// Sampling suggestions: the header's "vgen.steps", "vgen.guidance", "vgen.shift" metadata
// (stages/model/sampling_suggestions.hpp), read at open.
// Errors are Error(invalid_argument) "lora file 'F': key 'K': <what>" naming the first bad
// key (a bad suggestion's key is "__metadata__.vgen.steps" etc.): a key of no known layout, a layer no parameter matches, a shape mismatch, a missing
// lora_up/lora_down half, a non-scalar alpha; a name not under lora_dir or no such file.
// Thread-safety: LoraFile is immutable once opened; LoraLibrary is thread-safe. Blocking:
// opening and merging read files; merging computes (run it on a device thread).
#pragma once

#include "stages/job_spec.hpp"
#include "stages/model/lora_files.hpp"  // resolve_lora_file
#include "stages/model/model_backend.hpp"
#include "stages/model/safetensors.hpp"
#include "stages/model/sampling_suggestions.hpp"

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace vgen {

using ParameterShapes = std::map<std::string, std::vector<std::int64_t>>;
ParameterShapes parameter_shapes(const Module& module);

// One parameter's update from one file.
struct LoraUpdate {
  std::string parameter;                   // the module's full name
  std::string key;                         // the file's first key for it (messages)
  const SafetensorsTensor* up = nullptr;   // [out, r, 1...]
  const SafetensorsTensor* down = nullptr; // [r, in...]
  const SafetensorsTensor* diff = nullptr; // a full delta, the parameter's shape
  double alpha_over_rank = 1.0;            // for up @ down
};

class LoraFile {
 public:
  // Reads the header, hashes the file and groups its keys by layer; Error naming the file and
  // the first key of no known layout or an incomplete low-rank pair.
  static std::shared_ptr<const LoraFile> open(const std::filesystem::path& file);

  // The file's updates on a module with these parameters; Error naming the first key that
  // matches no parameter or has the wrong shape, or the first key if none matches at all.
  std::vector<LoraUpdate> map_onto(const ParameterShapes& shapes) const;
  // The update's delta (without the job's scale) in float32 on `device`, the parameter's shape.
  at::Tensor delta(const LoraUpdate& update, const std::vector<std::int64_t>& shape, c10::Device device) const;

  const std::filesystem::path& file() const { return st_.file(); }
  const std::string& sha256() const { return sha256_; }
  std::size_t layers() const { return layers_.size(); }
  // The steps / guidance / shift the file's header suggests (stages/model/sampling_suggestions.hpp).
  const SamplingSuggestion& suggestion() const { return suggestion_; }

 private:
  struct Layer {
    std::string path;  // diffusers naming, no prefix: blocks.0.attn1.to_q
    std::string key;   // the first file key seen for it
    const SafetensorsTensor *up = nullptr, *down = nullptr, *alpha = nullptr, *diff = nullptr, *diff_b = nullptr;
  };
  explicit LoraFile(SafetensorsFile st) : st_(std::move(st)) {}
  at::Tensor load(const SafetensorsTensor& t) const;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

  SafetensorsFile st_;
  std::string sha256_;
  std::map<std::string, Layer> layers_;
  double metadata_alpha_ = 0;  // 0: none in the header
  SamplingSuggestion suggestion_;
};

// A job's LoRA set: each file with its scale, in the job's order.
struct LoraChoice {
  std::shared_ptr<const LoraFile> file;
  double scale = 1.0;
};

// The merged parameters of `set` over `base` (base + sum of scaled deltas, base's dtype), and
// their bytes. Error as map_onto.
std::map<std::string, at::Tensor> merge_loras(const Module& base, const std::vector<LoraChoice>& set);

// The LoRA files of one lora_dir, each opened and hashed once while unchanged (same path,
// size and modification time).
class LoraLibrary {
 public:
  explicit LoraLibrary(std::filesystem::path lora_dir) : dir_(std::move(lora_dir)) {}
  std::shared_ptr<const LoraFile> get(const std::string& name);
  // The job's files in order, with each LoraRef's sha256 filled in.
  std::vector<LoraChoice> resolve(std::vector<LoraRef>& refs);
  const std::filesystem::path& dir() const { return dir_; }

 private:
  struct Entry {
    std::uintmax_t size = 0;
    std::filesystem::file_time_type mtime;
    std::shared_ptr<const LoraFile> file;
  };
  std::filesystem::path dir_;
  std::mutex mutex_;
  std::map<std::filesystem::path, Entry> files_;
};

// The key that identifies a LoRA set for grouping and caching: "name@sha256*scale;..." ("" for
// no LoRA). Jobs share a denoise group only with equal keys.
std::string lora_set_key(const std::vector<LoraRef>& refs);

}  // namespace vgen
