#include "stages/model/aoti_library_cache.hpp"

#include "runtime/errors.hpp"

#include <caffe2/serialize/inline_container.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

namespace vgen {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFilesList = "files.list";  // "<size>\t<relative path>" per line
constexpr const char* kSourceFile = "source";     // the .pt2's path, beside its entries

// FNV-1a: a stable name for a path's folder (std::hash is not promised stable across builds);
// the folder's "source" file holds the path itself, checked on use.
std::string path_key(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  std::ostringstream out;
  out << std::hex << h;
  return out.str();
}

std::string safe_name(std::string s) {
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return s;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool make_private_dirs(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return true;
  if (!make_private_dirs(dir.parent_path())) return false;
  return ::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST;
}

// The entry's files as its list says, if each is there with its size; nullopt otherwise.
std::optional<AotiUnpacked> complete_entry(const fs::path& entry) {
  std::ifstream list(entry / kFilesList);
  if (!list) return std::nullopt;
  AotiUnpacked u{.model_dir = entry / "model"};
  std::string line;
  std::error_code ec;
  while (std::getline(list, line)) {
    const auto tab = line.find('\t');
    if (tab == std::string::npos) return std::nullopt;
    const auto file = u.model_dir / line.substr(tab + 1);
    std::uint64_t want = 0;
    const auto digits = std::string_view(line).substr(0, tab);
    if (std::from_chars(digits.data(), digits.data() + digits.size(), want).ec != std::errc{}) return std::nullopt;
    if (fs::file_size(file, ec) != want || ec) return std::nullopt;
    if (file.extension() == ".so") u.library = file;
    if (file.extension() == ".blob") u.weights = file;
  }
  if (u.library.empty()) return std::nullopt;
  return u;
}

// The model an entry's name ("<size>-<mtime>-<inode>-<model>") is for; "" for another name.
std::string model_of(const std::string& entry) {
  std::size_t at = 0;
  for (int field = 0; field < 3; ++field) {
    const auto dash = entry.find('-', at);
    if (dash == std::string::npos || dash == at) return {};
    for (auto i = at; i < dash; ++i)
      if (!std::isdigit(static_cast<unsigned char>(entry[i]))) return {};
    at = dash + 1;
  }
  return entry.substr(at);
}

// Whether `dir` is a real folder (not a link) of this user that nobody else may write or read:
// what is loaded from it is code.
bool private_folder(const fs::path& dir) {
  struct stat st{};
  return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0;
}

// Removes, best effort, the entries of other versions of this .pt2's `model` and the folders of
// .pt2 files that no longer exist (another process may be using them: a loaded library stays
// mapped after its file is removed).
void prune(const fs::path& root, const fs::path& own_folder, const std::string& version, const std::string& model) noexcept try {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(own_folder, ec)) {
    const auto name = e.path().filename().string();
    if (name != version + model && name.rfind(".tmp-", 0) != 0 && model_of(name) == model) fs::remove_all(e.path(), ec);
  }
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory(ec) || e.path() == own_folder) continue;
    const auto source = read_text(e.path() / kSourceFile);
    if (!source.empty() && !fs::exists(source, ec)) fs::remove_all(e.path(), ec);
  }
} catch (...) {  // a folder another process removed while this one listed it: nothing to prune there
}

// Writes the records of `model` (and the package's separate constants, flattened beside them,
// as torch's loader does) into `dir`; returns the files' list (empty: no library among them).
std::string write_records(caffe2::serialize::PyTorchStreamReader& reader, const std::string& model, const fs::path& dir) {
  const std::string model_prefix = "data/aotinductor/" + model + "/", const_prefix = "data/constants/";
  std::string list;
  bool library = false;
  std::vector<char> buffer(8u << 20);
  for (const auto& name : reader.getAllRecords()) {
    fs::path rel;
    if (name.rfind(model_prefix, 0) == 0) rel = name.substr(model_prefix.size());
    else if (name.rfind(const_prefix, 0) == 0) rel = fs::path(name).filename();
    else continue;
    if (rel.empty() || rel.is_absolute() || rel.lexically_normal().string().rfind("..", 0) == 0) continue;
    const auto out_path = dir / rel;
    if (!make_private_dirs(out_path.parent_path())) throw std::runtime_error("cannot create " + out_path.parent_path().string());
    std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
    const auto size = reader.getRecordSize(name);
    auto chunks = reader.createChunkReaderIter(name, size, buffer.size());
    std::size_t written = 0;
    while (written < size) {
      const auto n = chunks.next(buffer.data());
      if (n == 0) break;
      out.write(buffer.data(), static_cast<std::streamsize>(n));
      written += n;
    }
    out.close();
    if (!out || written != size) throw std::runtime_error("could not write " + out_path.string());
    library |= rel.extension() == ".so";
    list += std::to_string(size) + "\t" + rel.string() + "\n";
  }
  return library ? list : std::string();
}

}  // namespace

fs::path AotiLibraryCache::default_root() {
  if (const char* v = std::getenv("VGEN_AOTI_CACHE"); v && *v) return std::string(v) == "off" || *v != '/' ? fs::path() : fs::path(v);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return fs::path(x) / "vgen" / "aoti";
  if (const char* h = std::getenv("HOME"); h && *h == '/') return fs::path(h) / ".cache" / "vgen" / "aoti";
  return {};
}

AotiLibraryCache& AotiLibraryCache::process() {
  static AotiLibraryCache cache(default_root());
  return cache;
}

std::optional<AotiUnpacked> AotiLibraryCache::unpack(const fs::path& pt2, const std::string& model_name, std::string* why) const {
  auto refuse = [&](std::string reason) -> std::optional<AotiUnpacked> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (!enabled()) return refuse("the compiled-model cache is off");
  std::error_code ec;
  const auto source = fs::canonical(pt2, ec);
  if (ec) throw_error(ErrorKind::invalid_argument, "compiled model file '" + pt2.string() + "' does not exist");
  // The file's version: size, modification time (ns) and inode (a re-export written beside and
  // renamed over it is a new inode even with the size and time kept).
  struct stat st{};
  if (::stat(source.c_str(), &st) != 0) throw_error(ErrorKind::invalid_argument, "compiled model file '" + pt2.string() + "' cannot be read");
  const auto mtime = static_cast<long long>(st.st_mtim.tv_sec) * 1'000'000'000LL + st.st_mtim.tv_nsec;
  const auto folder = root_ / path_key(source.string());
  const auto version = std::to_string(st.st_size) + "-" + std::to_string(mtime) + "-" + std::to_string(st.st_ino) + "-";
  const auto model = safe_name(model_name);
  const auto entry = folder / (version + model);
  if (!make_private_dirs(folder)) return refuse("cannot create the folder '" + folder.string() + "'");
  if (!private_folder(folder)) return refuse("the folder '" + folder.string() + "' is not this user's alone (mode 0700, not a link)");
  // One unpack of a .pt2 at a time, across threads and processes (flock: each open is its own
  // lock holder): the check, the unpack and the rename are one step for the others.
  const int lock_fd = ::open((folder / ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX) != 0) {
    if (lock_fd >= 0) ::close(lock_fd);
    return refuse("cannot lock '" + (folder / ".lock").string() + "'");
  }
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }
  } unlock{lock_fd};
  const auto recorded = read_text(folder / kSourceFile);
  if (!recorded.empty() && recorded != source.string()) return refuse("the folder '" + folder.string() + "' belongs to " + recorded);
  if (auto hit = complete_entry(entry)) {
    hit->reused = true;
    return hit;
  }
  fs::remove_all(entry, ec);  // an incomplete or altered entry
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(source.string());
  } catch (const std::exception& e) {
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    throw_error(ErrorKind::invalid_argument, "compiled model file '" + pt2.string() + "' is not a readable AOTInductor package: " +
                                                 truncate_utf8(c10 ? c10->what_without_backtrace() : e.what(), 300));
  }
  std::string tmp_name = (folder / (".tmp-" + model + "-XXXXXX")).string();
  if (::mkdtemp(tmp_name.data()) == nullptr) return refuse("cannot write in '" + folder.string() + "'");
  const fs::path tmp(tmp_name);
  try {
    const auto list = write_records(*reader, model_name, tmp / "model");
    if (list.empty()) {
      fs::remove_all(tmp, ec);
      return refuse("the package holds no compiled library for '" + model_name + "'");
    }
    std::ofstream(tmp / kFilesList, std::ios::binary) << list;
    if (recorded.empty()) std::ofstream(folder / kSourceFile, std::ios::binary) << source.string();
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    return refuse(std::string("could not unpack: ") + e.what());
  }
  if (::rename(tmp.c_str(), entry.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    fs::remove_all(tmp, ec);
    return refuse("cannot put the unpacked entry in place: " + reason);
  }
  auto made = complete_entry(entry);
  if (!made) return refuse("the unpacked entry '" + entry.string() + "' is incomplete");
  prune(root_, folder, version, model);
  return made;
}

}  // namespace vgen
