// SafetensorsFile: a reader over the safetensors format (an 8-byte little-endian header
// length N, N bytes of JSON header, then the raw tensor bytes). Opening reads and checks only
// the header; tensor bytes are read on demand. No LibTorch here: stages/model/lora.cpp turns the
// bytes into tensors.
//
// Every entry of the header is checked against the file before it is trusted: the header
// length fits in the file (and is at most 100 MiB), the header is a JSON object, each tensor
// has a known dtype, a shape of non-negative integers, and data_offsets [begin, end] with
// end - begin == product(shape) * element size (no overflow), inside the data region; the
// tensors do not overlap and cover the data region without holes (as the format requires);
// "__metadata__" is an object of strings. Any violation is Error(invalid_argument)
// "safetensors file 'F': <what> (tensor 'K')" naming the file and the first bad key.
// Thread-safety: an immutable value once opened; read() opens the file anew on each call, so
// several threads may read at once. Blocking: open() and read() do file I/O.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace vgen {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;                // "F32", "F16", "BF16", "F64", "I64", ... as in the file
  std::vector<std::int64_t> shape;  // empty: a scalar
  std::uint64_t begin = 0, end = 0;  // byte range inside the data region
  std::size_t element_size = 0;
  std::uint64_t elements() const;
};

class SafetensorsFile {
 public:
  // Reads and checks the header (see above). Error(invalid_argument) naming the file.
  static SafetensorsFile open(const std::filesystem::path& file);

  const std::filesystem::path& file() const { return file_; }
  std::uint64_t file_size() const { return file_size_; }
  std::uint64_t data_start() const { return data_start_; }  // file offset of the data region
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in header order
  const SafetensorsTensor* find(std::string_view name) const;                 // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's raw bytes (little-endian, row-major). Error(invalid_argument) if the file
  // has changed size since open() or cannot be read.
  std::string read(const SafetensorsTensor& tensor) const;

  // Bytes per element of a safetensors dtype name; 0 when unknown.
  static std::size_t element_size_of(std::string_view dtype);

 private:
  std::filesystem::path file_;
  std::uint64_t file_size_ = 0;
  std::uint64_t data_start_ = 0;  // 8 + header length
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes a safetensors file (tests and tools): tensors in the given order, packed. `bytes`
// must hold product(shape) * element size bytes each; Error(invalid_argument) otherwise.
struct SafetensorsEntry {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};
void write_safetensors(const std::filesystem::path& file, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace vgen
