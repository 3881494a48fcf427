// OutputReservations: which unfinished job writes which output file of the Runtime's output
// directory, so that two jobs never write one name, a finished job's output is not overwritten
// by another job (unless outputs may be), and vgen's own files are never outputs. Also the
// directory locks of config.exclusive_output (lock_output_dirs).
// Internal to vgen_engine (api/engine.cpp owns one). Ownership: owns its map of claims; the
// files themselves belong to the jobs. Thread-safety: every member may be called from any
// thread (one mutex; reserve calls `own_output` under it, which must not call back here).
// Blocking: reserve stats the file and may query the job store through `own_output`.
// Cancellation: none (no waiting); a job that ends, however, releases its name.
#pragma once

#include "runtime/output_lock.hpp"
#include "stages/job_spec.hpp"

#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace vgen::detail {

class OutputReservations {
 public:
  // `journal`: the job store's file (its name is reserved), or empty.
  OutputReservations(std::filesystem::path output_dir, std::filesystem::path journal, bool overwrite_outputs);

  // <output_dir>/<spec.name, or the id><the format's extension>.
  std::filesystem::path path_for(const JobSpec& spec, const std::string& id) const;

  // Reserves path_for(spec, id) for job `id` and returns it. Throws invalid_argument for a name
  // reserved for vgen's own files, already_exists for a name another unfinished job writes, and
  // for an existing file unless outputs may be overwritten, the job is `resuming` (accepted
  // under this name already), or `own_output(path)` says the file is this same job's output.
  std::filesystem::path reserve(const std::string& id, const JobSpec& spec, bool resuming,
                                const std::function<bool(const std::filesystem::path&)>& own_output);

  // Frees `output` if job `id` holds it (a no-op otherwise).
  void release(const std::filesystem::path& output, const std::string& id);

 private:
  std::filesystem::path output_dir_, journal_;
  bool overwrite_outputs_;
  mutable std::mutex mutex_;
  std::map<std::filesystem::path, std::string> claimed_;  // output path -> the unfinished job writing it
};

// The locks of config.exclusive_output: the output directory's, and the journal's own when it
// is kept elsewhere (a journal can then be shared by two output directories). Throws what
// OutputLock throws when another process holds one.
std::vector<OutputLock> lock_output_dirs(const std::filesystem::path& output_dir, const std::filesystem::path& journal);

}  // namespace vgen::detail
