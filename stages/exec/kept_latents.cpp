#include "stages/exec/kept_latents.hpp"

#include "runtime/errors.hpp"
#include "runtime/metrics.hpp"
#include "runtime/executor.hpp"
#include "stages/exec/result_latents.hpp"
#include "stages/families/family.hpp"
#include "stages/job_spec.hpp"

#include <ATen/ATen.h>

#include <vector>

namespace vgen {

namespace fs = std::filesystem;

namespace {

// Beside the video first (`vgen extend` of a file), then the output folder (HTTP / OpenAI extend
// by a finished job's id, whose bytes arrive as an upload elsewhere).
std::vector<fs::path> folders_for(const JobSpec& spec, const fs::path& out_dir) {
  return {fs::path(spec.video).parent_path(), out_dir};
}

}  // namespace

KeptLatents::KeptLatents(KeptLatentsOptions options, Executor& executor) : options_(std::move(options)), executor_(executor) {}

std::string KeptLatents::resolve(const JobSpec& spec, const std::string& package_id) const {
  if (!spec.extend || spec.video_sha256.empty()) return {};
  return find_kept_result_latents(folders_for(spec, options_.out_dir), spec.video_sha256, package_id).file_sha256;
}

boost::asio::awaitable<void> KeptLatents::load(FamilyJob& w, const std::string& package_id) const {
  if (w.spec.video_latents_sha256.empty()) co_return;
  auto find = [folders = folders_for(w.spec, options_.out_dir), sha = w.spec.video_sha256, package_id] {
    return find_kept_result_latents(folders, sha, package_id);
  };
  auto found = co_await executor_.pool("codec").run(find);
  if (!found.latents.defined() || found.file_sha256 != w.spec.video_latents_sha256)
    throw_error(ErrorKind::not_found, "video_latents_sha256: the video's kept latents that the job was admitted with are " +
                                          std::string(found.latents.defined() ? "changed" : "gone") +
                                          " (its video deleted or rendered again); submit the job again");
  w.video_latents = std::move(found.latents);
  if (options_.metrics)
    options_.metrics->counter("vgen_extend_latents_reused_total",
                              "Extend jobs whose overlap latents came from the finished job that made their video").inc();
}

boost::asio::awaitable<void> KeptLatents::keep(const FamilyJob& w, const std::string& package_id, int extend_overlap) const {
  if (extend_overlap <= 0 || w.spec.interpolate > 1 || w.spec.upscale > 1 || !w.state.latents.defined()) co_return;
  auto write = [output = w.output, package_id, latents = w.state.latents] {
    try {
      keep_result_latents(output, package_id, latents);
      return true;
    } catch (const std::exception&) {
      return false;
    }
  };
  // The file is in place: a cancel now (its wait aborted) must not end the job as cancelled, so
  // whatever ends this wait only costs the kept latents.
  bool kept = false;
  try {
    kept = co_await executor_.pool("codec").run(write);
  } catch (...) {
    kept = false;
  }
  if (!kept && options_.metrics)
    options_.metrics->counter("vgen_result_latents_failed_total", "Finished jobs whose latents could not be kept for extension").inc();
}

void remove_kept_latents(const fs::path& output) {
  if (!output.empty()) remove_result_latents(output);
}

}  // namespace vgen
