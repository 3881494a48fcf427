#include "stages/model/safetensors.hpp"

#include "runtime/errors.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <system_error>

namespace vgen {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr std::uint64_t kMaxHeader = 100ull << 20;  // what the reference implementation accepts

[[noreturn]] void fail(const fs::path& file, const std::string& what, std::string_view key = {}) {
  std::string msg = "safetensors file '" + file.string() + "': " + what;
  if (!key.empty()) msg += " (tensor '" + truncate_utf8(std::string(key), 200) + "')";
  throw_error(ErrorKind::invalid_argument, msg);
}

std::uint64_t le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative integer from the header (Boost.JSON keeps those that fit in int64 as int64).
bool as_count(const json::value& v, std::uint64_t& out) {
  if (v.is_int64() && v.get_int64() >= 0) out = static_cast<std::uint64_t>(v.get_int64());
  else if (v.is_uint64()) out = v.get_uint64();
  else return false;
  return true;
}

SafetensorsTensor parse_entry(const fs::path& file, const std::string& name, const json::value& v) {
  const auto* o = v.if_object();
  if (!o) fail(file, "entry is not an object", name);
  SafetensorsTensor t;
  t.name = name;
  const auto* dtype = o->if_contains("dtype");
  if (!dtype || !dtype->is_string()) fail(file, "entry lacks a string 'dtype'", name);
  t.dtype = std::string(dtype->get_string());
  t.element_size = SafetensorsFile::element_size_of(t.dtype);
  if (t.element_size == 0) fail(file, "unknown dtype '" + truncate_utf8(t.dtype, 20) + "'", name);
  const auto* shape = o->if_contains("shape");
  if (!shape || !shape->is_array()) fail(file, "entry lacks an array 'shape'", name);
  if (shape->get_array().size() > 16) fail(file, "shape has more than 16 dimensions", name);
  std::uint64_t elements = 1;
  for (const auto& d : shape->get_array()) {
    std::uint64_t n = 0;
    if (!as_count(d, n) || n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(file, "shape holds a value that is not a non-negative integer", name);
    if (n != 0 && elements > std::numeric_limits<std::uint64_t>::max() / n) fail(file, "shape overflows", name);
    elements *= n;
    t.shape.push_back(static_cast<std::int64_t>(n));
  }
  if (elements > std::numeric_limits<std::uint64_t>::max() / t.element_size) fail(file, "shape overflows", name);
  const auto* offsets = o->if_contains("data_offsets");
  if (!offsets || !offsets->is_array() || offsets->get_array().size() != 2 || !as_count(offsets->get_array()[0], t.begin) ||
      !as_count(offsets->get_array()[1], t.end) || t.end < t.begin)
    fail(file, "'data_offsets' must be [begin, end] with 0 <= begin <= end", name);
  if (t.end - t.begin != elements * t.element_size)
    fail(file, "data_offsets span " + std::to_string(t.end - t.begin) + " bytes but shape and dtype need " +
                   std::to_string(elements * t.element_size),
         name);
  for (const auto& kv : *o)
    if (kv.key() != "dtype" && kv.key() != "shape" && kv.key() != "data_offsets")
      fail(file, "unknown entry field '" + truncate_utf8(std::string(kv.key()), 40) + "'", name);
  return t;
}

}  // namespace

std::uint64_t SafetensorsTensor::elements() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::size_t SafetensorsFile::element_size_of(std::string_view d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

SafetensorsFile SafetensorsFile::open(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) fail(file, "not a regular file");
  SafetensorsFile f;
  f.file_ = file;
  f.file_size_ = fs::file_size(file, ec);
  if (ec) fail(file, "cannot read its size: " + ec.message());
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot open");
  if (f.file_size_ < 8) fail(file, "truncated: " + std::to_string(f.file_size_) + " bytes, no 8-byte header length");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  const std::uint64_t n = le64(len);
  if (n > kMaxHeader) fail(file, "header length " + std::to_string(n) + " exceeds 100 MiB");
  if (n > f.file_size_ - 8)
    fail(file, "truncated: header length " + std::to_string(n) + " exceeds the " + std::to_string(f.file_size_ - 8) +
                   " bytes after it");
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) fail(file, "cannot read the header");
  f.data_start_ = 8 + n;
  json::value root;
  try {
    root = json::parse(header);
  } catch (const std::exception& e) {
    fail(file, std::string("header is not JSON: ") + e.what());
  }
  const auto* top = root.if_object();
  if (!top) fail(file, "header is not a JSON object");
  for (const auto& kv : *top) {
    const std::string key(kv.key());
    if (key == "__metadata__") {
      const auto* m = kv.value().if_object();
      if (!m) fail(file, "'__metadata__' is not an object");
      for (const auto& e : *m) {
        if (!e.value().is_string()) fail(file, "'__metadata__' value is not a string", e.key());
        f.metadata_.emplace(std::string(e.key()), std::string(e.value().get_string()));
      }
      continue;
    }
    f.tensors_.push_back(parse_entry(file, key, kv.value()));
  }
  // The data region is exactly the tensors' bytes: sorted by begin, each starts where the
  // previous ended, and the last ends at the end of the file.
  std::vector<const SafetensorsTensor*> order;
  for (const auto& t : f.tensors_) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin || (a->begin == b->begin && a->end < b->end); });
  const std::uint64_t data = f.file_size_ - f.data_start_;
  std::uint64_t at = 0;
  for (const auto* t : order) {
    if (t->begin < at) fail(file, "tensor overlaps another", t->name);
    if (t->begin > at) fail(file, "a hole of " + std::to_string(t->begin - at) + " bytes precedes tensor", t->name);
    if (t->end > data)
      fail(file, "truncated: tensor ends at byte " + std::to_string(t->end) + " of a " + std::to_string(data) +
                     "-byte data region",
           t->name);
    at = t->end;
  }
  if (at != data) fail(file, std::to_string(data - at) + " bytes after the last tensor belong to none");
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

std::string SafetensorsFile::read(const SafetensorsTensor& t) const {
  std::error_code ec;
  const auto size = fs::file_size(file_, ec);
  if (ec || size != file_size_) fail(file_, "changed since it was opened", t.name);
  std::ifstream in(file_, std::ios::binary);
  std::string bytes(t.end - t.begin, '\0');
  in.seekg(static_cast<std::streamoff>(data_start_ + t.begin));
  if (!in || !in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) fail(file_, "cannot read tensor", t.name);
  return bytes;
}

void write_safetensors(const fs::path& file, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata) {
  json::object header;
  if (!metadata.empty()) {
    json::object m;
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::uint64_t at = 0;
  for (const auto& e : entries) {
    std::uint64_t n = SafetensorsFile::element_size_of(e.dtype);
    for (auto d : e.shape) n *= static_cast<std::uint64_t>(d);
    if (n != e.bytes.size()) throw_error(ErrorKind::invalid_argument, "write_safetensors: '" + e.name + "' has the wrong byte count");
    json::array shape(e.shape.begin(), e.shape.end());
    header[e.name] = json::object{{"dtype", e.dtype}, {"shape", std::move(shape)}, {"data_offsets", json::array{at, at + n}}};
    at += n;
  }
  auto text = json::serialize(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-aligned, as the reference writer does
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xff);
  out.write(reinterpret_cast<const char*>(len), 8);
  out << text;
  for (const auto& e : entries) out.write(e.bytes.data(), static_cast<std::streamsize>(e.bytes.size()));
  if (!out) throw_error(ErrorKind::internal, "write_safetensors: cannot write '" + file.string() + "'");
}

}  // namespace vgen
