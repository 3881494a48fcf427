// ModelPackage: a model directory exported by tools/export_wan.py (docs/MODEL_PACKAGE.md):
// manifest.json plus component files. Reading it checks the format and version, that every
// component exists with its recorded size, and (for files up to verify_limit bytes) its
// sha256, so that a missing, truncated or corrupt package is reported by name before any job
// runs. No LibTorch here: loading the components is stages/model_backend's job. It reads what
// every family has; a family reads its own sections from `manifest` (WanConfig, LtxConfig).
// Thread-safety: an immutable value once loaded; share it freely.
#pragma once

#include "stages/job_spec.hpp"

#include <boost/json/object.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace vgen {

inline constexpr int kModelPackageFormatVersion = 1;

// A component compiled ahead of time for one device type (manifest components.<name>.compiled.
// <device type>, e.g. an AOTInductor .pt2 for "cpu"). Only its place in the package is checked
// when the package loads: a missing, damaged or foreign file is refused when the component is
// first loaded on a device of that type, and the component's own file serves instead
// (stages/model/model_backend.hpp, ModuleCache::get_component).
struct CompiledComponent {
  std::string backend;         // "aoti"
  std::filesystem::path file;  // absolute, symlinks resolved, inside the package
  std::string sha256;
  std::uint64_t bytes = 0;
  std::string torch;           // the torch version the exporter compiled it with ("" if not recorded)
};

struct ModelComponent {
  std::filesystem::path file;  // absolute, symlinks resolved: the file that was checked (inside the package)
  std::string sha256;
  std::uint64_t bytes = 0;
  std::string format;          // "torchscript", "sentencepiece"; "aoti" for a component that is only a .pt2
  std::string dtype;           // the component's own dtype (a bf16 package keeps its VAE in float32)
  std::map<std::string, CompiledComponent> compiled;  // by device type ("cpu", "cuda")
};

struct ModelPackage {
  std::filesystem::path dir;
  std::string family;          // "wan2.1-t2v"
  std::string dtype;           // "float32" | "float16" | "bfloat16"
  std::map<std::string, ModelComponent> components;  // tokenizer, text_encoder, transformer, vae_decoder
  // tokenizer
  int max_length = 512, pad_id = 0, eos_id = 1;
  bool add_eos = true;
  // scheduler
  std::string scheduler_type;
  boost::json::object scheduler_config;
  // latent layout
  int latent_channels = 16, temporal_scale = 4, spatial_scale = 8;
  std::vector<double> latents_mean, latents_std;
  // live previews (manifest preview.latent_rgb, fitted by tools/vgen_export/latent_preview.py):
  // rgb in [0, 1] ~ preview_weight (3 x latent_channels, row-major) x loop latent + preview_bias.
  // Both empty for a package without them: previews are off for its jobs.
  std::vector<double> preview_weight, preview_bias;
  // Precisions (issue 24, manifest "precisions", docs/MODEL_PACKAGE.md): the base one is what
  // the components as listed hold ("int8" when components.transformer.quantization says
  // "int8-dynamic", else the package dtype); each variant maps the components it replaces
  // onto components of the package: {"int8": {"transformer": "transformer_int8"}}. The list a
  // job may choose from is limits.precisions, the default defaults.precision.
  std::string base_precision;
  std::map<std::string, std::map<std::string, std::string>> precision_variants;
  // limits and defaults for jobs
  SpecLimits limits;
  JobSpec defaults;

  const ModelComponent& component(const std::string& name) const;
  // The component that serves `name` for a job at `precision`: the variant's replacement, or
  // `name` itself (the base precision, an empty one, or a component the variant keeps).
  const std::string& component_for(const std::string& name, const std::string& precision) const;
  // Stable identity for cache keys and placement: a hash of the whole manifest (which names
  // every component's sha256); the transformer's sha256 for a package built in memory.
  std::string id() const;
  std::string identity;  // set by load_model_package
  // The whole manifest as read (sections only one family reads, e.g. "experts", "transformer",
  // are taken from here, never by reading the file again); empty for a package built in memory.
  boost::json::object manifest;
};

struct PackageLoadOptions {
  std::uint64_t verify_limit = 256ull << 20;  // sha256-check components up to this size
};

// Throws Error(invalid_argument) naming the package and the problem: a missing or wrongly typed
// field, an integer outside its range (every divisor is at least 1, every size and count has a
// generous upper bound, e.g. tokenizer.max_length in [2, 65536]), limits that allow no size or
// frame count, defaults outside the limits, or a component file that is not inside the package
// once symlinks are resolved.
ModelPackage load_model_package(const std::filesystem::path& dir, const PackageLoadOptions& options = {});

// Streaming SHA-256 of a file, lowercase hex.
std::string sha256_file(const std::filesystem::path& file);

}  // namespace vgen
