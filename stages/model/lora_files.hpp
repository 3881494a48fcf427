// The LoRA files of a lora_dir, by name: how a job's "loras" name resolves to a file, and the
// list of the names that resolve (what a client may offer, e.g. GET /v1/loras and the page's
// LoRA picker). One rule for both: a name lists exactly when it resolves.
//
// No LibTorch (api/ uses it). Stateless free functions over the file system; safe from any
// thread. A file may appear or vanish between a listing and a job that names it: the job's own
// resolve decides. Not cancellable (each call is a directory read and a few stat calls).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace vgen {

// The file that `name` names: lora_dir/name.safetensors (or lora_dir/name when it already
// ends in .safetensors), symlinks resolved, which must be a regular file inside lora_dir once
// resolved. Error(invalid_argument) "loras: ..." naming the name; also when lora_dir is empty.
std::filesystem::path resolve_lora_file(const std::filesystem::path& lora_dir, const std::string& name);

struct LoraFileEntry {
  std::string name;     // what a job's "loras" names: the file name without ".safetensors"
  std::uintmax_t bytes;  // the resolved file's size
};

// Every *.safetensors directly in lora_dir whose name resolve_lora_file accepts, sorted by name
// (hidden files, sub-folders and links leading outside lora_dir are left out). Empty when
// lora_dir is empty or does not exist (a service without LoRAs offers none).
std::vector<LoraFileEntry> list_lora_files(const std::filesystem::path& lora_dir);

}  // namespace vgen
