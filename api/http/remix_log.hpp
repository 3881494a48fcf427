// RemixLog: which video each remix was made from (`remixed_from_video_id` on OpenAI's video
// object), kept across restarts in one file, <output_dir>/.vgen-videos-remixed.
//
// The file is append-only: one "<remix id> <source id>\n" line per remix, written with one
// write(2) on an O_APPEND descriptor and fsync'd before add() returns, so a remix costs one
// short write however many came before. A crash can leave a torn last line (no '\n'): reading
// skips it (that remix then reads as not remixed, as if the crash came before its line).
// Entries whose remix is deleted or expired are dead: forget() drops one when DELETE removes
// its video, and the opening pass asks `alive` about every entry (a video the job store
// expired is only noticed there). The file is compacted (rewritten atomically with the live
// entries, runtime/atomic_file) when it is opened with a dead or torn line, and whenever it
// holds more dead lines than live ones; so it stays within twice the live entries plus one.
//
// Thread-safety: every member may be called from any thread (one mutex, held across the
// write and fsync of add/forget). Blocking: the constructor, add() and forget() do file I/O
// and fsync: call them off the io threads; source_of() only reads memory.
// Errors: add() and a compaction throw vgen::Error (io_error_kind) when the file cannot be
// written; the entry stays known in memory. A missing or unreadable file reads as empty.
// Cancellation: none.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace vgen {

class RemixLog {
 public:
  // Reads `file`; `alive(id)` says whether a remix's video still exists (called for each entry
  // read, here only; nullptr: all are).
  RemixLog(std::filesystem::path file, const std::function<bool(const std::string& id)>& alive);

  // Records that video `id` was made from `source`. Ids are single words (no whitespace).
  void add(const std::string& id, const std::string& source);
  // Drops `id`'s entry (its video was deleted); compacts when dead lines outnumber live ones.
  void forget(std::string_view id);
  // The video `id` was made from; empty for any other id.
  std::string source_of(std::string_view id) const;

  // Lines in the file now, live and dead (for tests and metrics).
  std::size_t file_lines() const;

 private:
  void compact();  // mutex held

  std::filesystem::path file_;
  mutable std::mutex mutex_;
  std::map<std::string, std::string, std::less<>> sources_;  // remix id -> source id
  std::size_t file_lines_ = 0;
};

}  // namespace vgen
