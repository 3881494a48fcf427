// Where a compiled model's files are unpacked to be loaded, once per machine rather than once per
// process. torch's AOTIModelPackageLoader extracts a .pt2's model (its shared library holds the
// frozen weights: 145 MB for one method of the large bench transformer) into a new temporary
// folder on every load and deletes it afterwards, so every `vgen render` pays for writing it
// again. This cache unpacks each compiled model of a .pt2 once into
//   <root>/<hash of the .pt2's path>/<size>-<mtime>-<inode>-<model>/
// and the "aoti" backend (stages/model/model_backend.cpp) loads the library from there.
//
// An entry is made in a private temporary folder and renamed into place when complete, under a
// lock on the .pt2's folder (flock), so a reader never sees half an entry and two processes (or
// two devices of one) unpacking the same model at once end with the one entry. Each entry lists its files and sizes; a hit whose
// files do not match that list is unpacked again. An entry of an older version of the same
// .pt2 (other size or mtime) and the entries of .pt2 files that no longer exist are removed when
// a new entry is made (a process that found the old entry and has not loaded it yet then fails
// to, and loads through torch's loader instead: model_backend.cpp). Folders are created private
// to the user (0700), and a .pt2's folder that is not (another user's, a link, open to others)
// is refused: what is loaded from it is code.
//
// Disabled (an empty root): the backend uses torch's own loader (a temporary folder per load).
// A model the cache cannot serve (no shared library in the package: torch compiles it from its
// C++ source; or the cache folder is not writable) also goes to torch's loader: unpack() says why.
// Thread-safety: unpack() may be called from any thread; set_root() before the first load.
// Blocking: file I/O (the first unpack writes the model's files).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace vgen {

struct AotiUnpacked {
  std::filesystem::path model_dir;  // the model's files (also the CUDA kernels' folder)
  std::filesystem::path library;    // the .so
  std::filesystem::path weights;    // a separate weights blob (torch's ".blob"), or empty
  bool reused = false;              // found complete from an earlier unpack
};

class AotiLibraryCache {
 public:
  // The process's cache: $VGEN_AOTI_CACHE (an absolute folder, or "off"), else
  // $XDG_CACHE_HOME/vgen/aoti, else $HOME/.cache/vgen/aoti.
  static AotiLibraryCache& process();
  static std::filesystem::path default_root();

  explicit AotiLibraryCache(std::filesystem::path root) : root_(std::move(root)) {}
  // Not thread-safe: before the first unpack (tests point the process's cache elsewhere).
  void set_root(std::filesystem::path root) { root_ = std::move(root); }
  const std::filesystem::path& root() const { return root_; }
  bool enabled() const { return !root_.empty(); }

  // The unpacked files of compiled model `model_name` ("forward-model") of `pt2`, unpacked now
  // if need be; std::nullopt with `why` set when this cache cannot serve it (disabled, no
  // library in the package, the folder not writable). Error(invalid_argument) naming the file
  // when the .pt2 is not a readable archive or holds no such model.
  std::optional<AotiUnpacked> unpack(const std::filesystem::path& pt2, const std::string& model_name,
                                     std::string* why = nullptr) const;

 private:
  std::filesystem::path root_;
};

}  // namespace vgen
