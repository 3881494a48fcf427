// KeptLatents: when the model set keeps, takes and removes a finished job's latents (the file
// format and its place: stages/exec/result_latents.hpp), for extending its output by latents
// (issue 34 item 4; a package with SpecLimits::extend_overlap > 0, e.g. SkyReels-V2 DF):
//
//  admission   resolve(): the SHA-256 of the kept latents file an extend job's video has (looked
//              up beside the video and in the output folder), which the job's spec then carries
//              (JobSpec::video_latents_sha256), so its content key says whether and which kept
//              latents make its bytes (review finding 5)
//  preprocess  load(): those very latents into the job (FamilyJob::video_latents); a job
//              admitted without any takes none, even if a file appeared since
//  encode      keep(): the job's final latents beside its output, once the file is in place
//  delete      remove_kept_latents(): with their video (review finding 6)
//
// Ownership: holds its options; the executor whose pool it reads and writes on outlives it.
// Thread-safety: every member may be called from any thread. Blocking: resolve() and
// remove_kept_latents() do file I/O on the calling thread; load() and keep() on the pool.
// Cancellation: load() is interrupted by a cancel of its awaiting coroutine; keep()'s wait is
// not: it runs once the output is in place, so a cancel then costs at most the kept latents.
// This header has no LibTorch (api/ calls remove_kept_latents); the source does.
#pragma once

#include <boost/asio/awaitable.hpp>

#include <filesystem>
#include <string>

namespace vgen {

class MetricsRegistry;  // runtime/metrics.hpp
class Executor;         // runtime/executor.hpp
struct FamilyJob;       // stages/families/family.hpp
struct JobSpec;         // stages/job_spec.hpp

struct KeptLatentsOptions {
  std::filesystem::path out_dir;      // where outputs go: searched after an extend video's own folder
  MetricsRegistry* metrics = nullptr;  // optional (outlives this): reuse and failure counters
};

class KeptLatents {
 public:
  // Reads and writes on executor's "codec" pool (looked up when used).
  KeptLatents(KeptLatentsOptions options, Executor& executor);

  // For an admitted extend job (video_sha256 set) of a package that extends by latents: the
  // SHA-256 of the bytes of its video's kept latents file made by `package_id` that verifies;
  // empty when there is none (or the job is no such job).
  std::string resolve(const JobSpec& spec, const std::string& package_id) const;
  // The latents admission resolved (w.spec.video_latents_sha256) into w.video_latents; nothing
  // when none was. Error(not_found, naming video_latents_sha256) when they are gone or changed
  // since (the video deleted or rendered again): the job's key names latents it cannot have.
  boost::asio::awaitable<void> load(FamilyJob& w, const std::string& package_id) const;
  // After w's output is in place: its final latents kept beside it, when the package extends by
  // latents (extend_overlap > 0) and the file's frames are the decoded ones (no post-stage).
  // A failure (or a cancel of the wait) is counted, never thrown.
  boost::asio::awaitable<void> keep(const FamilyJob& w, const std::string& package_id, int extend_overlap) const;

 private:
  KeptLatentsOptions options_;
  Executor& executor_;
};

// Removes the latents kept for `output` (a video being deleted); never throws. Blocking.
void remove_kept_latents(const std::filesystem::path& output);

}  // namespace vgen
