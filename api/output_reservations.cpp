#include "api/output_reservations.hpp"

#include "runtime/errors.hpp"
#include "stages/media/encode.hpp"

#include <system_error>
#include <utility>

namespace vgen::detail {

namespace fs = std::filesystem;

OutputReservations::OutputReservations(fs::path output_dir, fs::path journal, bool overwrite_outputs)
    : output_dir_(std::move(output_dir)), journal_(std::move(journal)), overwrite_outputs_(overwrite_outputs) {}

fs::path OutputReservations::path_for(const JobSpec& spec, const std::string& id) const {
  return output_dir_ / ((spec.name.empty() ? id : spec.name) + extension_for(spec.format));
}

fs::path OutputReservations::reserve(const std::string& id, const JobSpec& spec, bool resuming,
                                     const std::function<bool(const fs::path&)>& own_output) {
  auto output = path_for(spec, id);
  const auto file = output.filename().string();
  const auto journal = journal_.empty() ? std::string() : journal_.filename().string();
  if (file == "batch-summary.json" || file == OutputLock::file_name || (!journal.empty() && file == journal))
    throw_error(ErrorKind::invalid_argument, "name: '" + file + "' is reserved for vgen's own files");
  std::lock_guard lock(mutex_);
  if (const auto it = claimed_.find(output); it != claimed_.end())
    throw_error(ErrorKind::already_exists, "name: " + file + " is being written by job " + it->second);
  std::error_code ec;
  // A resumed job was accepted under this name already (its output may even be complete: a
  // stop between the rename and the store's record). The same job again (same content key)
  // may rewrite its own output: same bytes.
  if (!overwrite_outputs_ && !resuming && fs::exists(output, ec) && !own_output(output))
    throw_error(ErrorKind::already_exists, "name: " + file + " already holds another job's output; choose another name");
  claimed_.emplace(output, id);
  return output;
}

void OutputReservations::release(const fs::path& output, const std::string& id) {
  std::lock_guard lock(mutex_);
  if (auto it = claimed_.find(output); it != claimed_.end() && it->second == id) claimed_.erase(it);
}

std::vector<OutputLock> lock_output_dirs(const fs::path& output_dir, const fs::path& journal) {
  std::vector<OutputLock> locks;
  locks.push_back(OutputLock::for_directory(output_dir));
  if (!journal.empty()) {
    std::error_code e1, e2;
    const auto journal_dir = fs::weakly_canonical(fs::absolute(journal), e1).parent_path();
    const auto dir = fs::weakly_canonical(fs::absolute(output_dir), e2);
    if (e1 || e2 || journal_dir != dir) locks.push_back(OutputLock::for_file(journal));
  }
  return locks;
}

}  // namespace vgen::detail
