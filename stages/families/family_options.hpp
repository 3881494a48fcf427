// What a model family's factory gets besides its package (stages/families/family.hpp), and
// the settings of the caches every family keeps: its text-embedding cache and its LoRA files
// and merged variants (stages/model/lora.hpp, lora_variants.hpp). No LibTorch here: api/config.hpp
// holds TextCacheOptions and LoraOptions as they are, and the Runtime hands them down untouched.
#pragma once

#include "stages/exec/tiled_decode_options.hpp"

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>

namespace vgen {

// A family's cache of encoded prompts (config keys "cache.text.*").
struct TextCacheOptions {
  std::size_t entries = 256;  // 0: no cache
  std::chrono::seconds ttl{1800};
};

// Jobs' "loras" (config keys "lora_dir" and "cache.loras.mb").
struct LoraOptions {
  std::filesystem::path dir;                        // jobs' "loras" name files here; empty: LoRAs refused
  std::size_t cache_bytes = std::size_t{1} << 30;  // merged LoRA variants kept per model (0: none)
};

struct FamilyOptions {
  // "auto": a component's compiled file for the device when the package has one that loads,
  // else its TorchScript file; "torchscript": never a compiled one (stages/model/component_backends.hpp)
  std::string backend = "auto";
  TextCacheOptions text_cache;
  std::string model_name;  // the name jobs use for it (messages); empty: its directory's name
  LoraOptions lora;
  // When the VAE decodes in overlapping spatial tiles (stages/exec/tiled_decode.hpp); a
  // package's manifest section "decode" overrides it. Default "auto": only above 480p's area.
  TiledDecodeOptions decode;
};

}  // namespace vgen
