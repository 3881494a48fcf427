#include "stages/model/mapped_weights.hpp"

#include "runtime/errors.hpp"
#include "stages/model/safetensors.hpp"

#include <boost/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <set>

namespace vgen {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void bad(const fs::path& file, const std::string& what) {
  throw_error(ErrorKind::invalid_argument, "weights file '" + file.string() + "': " + what);
}

// One read-only, private mapping of a whole file; unmapped when the last tensor over it dies.
class Mapping {
 public:
  explicit Mapping(const fs::path& file) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) bad(file, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      bad(file, std::string("cannot stat: ") + std::strerror(err));
    }
    size_ = static_cast<std::size_t>(st.st_size);
    // PROT_WRITE with MAP_PRIVATE: an in-place write to a weight copies that page instead of
    // faulting; nothing reaches the file.
    void* p = size_ ? ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) : nullptr;
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) bad(file, std::string("mmap failed: ") + std::strerror(err));
    data_ = static_cast<char*>(p);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data_) ::munmap(data_, size_);
  }
  char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
};

std::string safetensors_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return "F32";
    case c10::kHalf: return "F16";
    case c10::kBFloat16: return "BF16";
    case c10::kDouble: return "F64";
    case c10::kLong: return "I64";
    case c10::kInt: return "I32";
    case c10::kShort: return "I16";
    case c10::kChar: return "I8";
    case c10::kByte: return "U8";
    case c10::kBool: return "BOOL";
    case c10::kFloat8_e4m3fn: return "F8_E4M3";  // an fp8 variant's Linear weights (issue 30)
    default: return std::string("unsupported ") + c10::toString(t);
  }
}

void delete_mapping_ref(void* ctx) { delete static_cast<std::shared_ptr<Mapping>*>(ctx); }

at::Tensor mapped_tensor(const std::shared_ptr<Mapping>& map, std::uint64_t offset, std::uint64_t bytes,
                         const std::vector<std::int64_t>& shape, c10::ScalarType dtype) {
  char* p = map->data() + offset;
  c10::DataPtr ptr(p, new std::shared_ptr<Mapping>(map), &delete_mapping_ref, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(ptr), /*allocator=*/nullptr,
                       /*resizable=*/false);
  return at::empty({0}, at::TensorOptions().dtype(dtype)).set_(storage, 0, shape);
}

}  // namespace

fs::path weights_file_for(const fs::path& module_file, const std::string& json) {
  if (json.empty()) return {};
  std::string name;
  try {
    const auto v = boost::json::parse(json);
    name = std::string(v.as_object().at("file").as_string());
  } catch (const std::exception& e) {
    throw_error(ErrorKind::invalid_argument, "model file '" + module_file.string() + "': bad '" + kWeightsExtraFile +
                                                 "' entry (" + e.what() + ")");
  }
  const fs::path p(name);
  if (name.empty() || p.has_parent_path() || name == "." || name == "..")
    throw_error(ErrorKind::invalid_argument, "model file '" + module_file.string() + "': weights file '" + name +
                                                 "' must be a file name beside it");
  return module_file.parent_path() / p;
}

std::uint64_t attach_mapped_weights(torch::jit::Module& module, const fs::path& weights, c10::Device device) {
  if (!fs::is_regular_file(weights)) bad(weights, "does not exist (the TorchScript file names it)");
  const auto file = SafetensorsFile::open(weights);  // header, dtypes, offsets checked
  const auto map = std::make_shared<Mapping>(weights);
  if (map->size() != file.file_size()) bad(weights, "changed size while being opened");

  std::map<std::string, at::Tensor> targets;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) targets.emplace(p.name, p.value);
  for (const auto& b : module.named_buffers(/*recurse=*/true)) targets.emplace(b.name, b.value);

  std::set<std::string> used;
  std::uint64_t mapped = 0;
  at::NoGradGuard no_grad;  // set_ on a parameter that requires grad
  for (auto& [name, target] : targets) {
    const auto* entry = file.find(name);
    if (!entry) bad(weights, "has no tensor '" + name + "' (the module's parameter or buffer)");
    if (entry->dtype != safetensors_dtype(target.scalar_type()))
      bad(weights, "tensor '" + name + "' is " + entry->dtype + " but the module expects " +
                       safetensors_dtype(target.scalar_type()));
    const auto offset = file.data_start() + entry->begin;
    if (offset % entry->element_size != 0) bad(weights, "tensor '" + name + "' is not aligned to its element size");
    auto t = mapped_tensor(map, offset, entry->end - entry->begin, entry->shape, target.scalar_type());
    if (!device.is_cpu()) t = t.to(device);
    target.set_(t);
    used.insert(name);
    mapped += entry->end - entry->begin;
  }
  for (const auto& t : file.tensors())
    if (!used.count(t.name)) bad(weights, "tensor '" + t.name + "' is not a parameter or buffer of the module");
  return mapped;
}

}  // namespace vgen
