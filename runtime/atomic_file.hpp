// Atomic output: a file (or a directory of files) appears at its target complete, or not at
// all. Every writer in vgen (videos, png frame directories, cached copies, batch
// summaries) goes through here instead of writing the target in place.
//
// How: the output is built at a temporary in the target's own folder, named
//   ".<target name>.tmp-<pid>-<12 hex digits>"
// (hidden, unique across threads and processes, and recognisable by sweep_temporaries), then
// fsync'd (every file, and every directory of a tree), renamed over the target, and the folder
// is fsync'd so that the rename itself survives a power cut. rename(2) replaces a file but not
// a non-empty directory: an old directory is first renamed aside (".<name>.old-<pid>-<hex>"),
// and removed once the new one is in place (put back if that rename fails).
//
// Errors: on any failure the temporary is removed and the target is left as it was, then
// vgen::Error is thrown naming the target (and the step) and the system's reason. (If only
// the last step, syncing the folder, fails, the new output is already in place but may not
// survive a power cut; the error is thrown all the same.) Its kind is
// io_error_kind(errno): transient for failures a retry may fix (disk full, quota, I/O error,
// too many open files, ...), internal otherwise (a path whose parent is a file, permissions,
// a name too long, replacing a non-empty directory by a file).
// Exceptions a writer callback throws are passed on unchanged, after the temporary is removed.
//
// Blocking: every function blocks the calling thread on file I/O and fsync (run it on a worker
// thread, never on an io_context thread). Thread-safety: independent calls may run
// concurrently, also on the same target: the last rename wins and no reader sees a partial
// output (two directory replacements racing on one target may fail one of them).
// Cancellation: none; a call runs to completion or failure.
#pragma once

#include "runtime/errors.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>

namespace vgen {

// The ErrorKind of a failed file operation's errno value: transient for ENOSPC, EDQUOT, EIO,
// EAGAIN, EINTR, EBUSY, ENFILE, EMFILE, ENOMEM, ETIMEDOUT and ESTALE; internal otherwise.
ErrorKind io_error_kind(int errno_value) noexcept;

// Replaces `target` (a file) with `bytes`.
void write_file_atomically(const std::filesystem::path& target, std::string_view bytes);
void write_file_atomically(const std::filesystem::path& target, std::span<const std::uint8_t> bytes);

// Calls `write(temporary)`, which must create a file or a directory at `temporary` (a path in
// the target's folder that does not exist yet), then puts it in place of `target` (a file or a
// directory). For writers that write files themselves (FFmpeg's muxers, png directories).
using AtomicWriter = std::function<void(const std::filesystem::path& temporary)>;
void write_atomically(const std::filesystem::path& target, const AtomicWriter& write);

// Replaces `to` with a copy of `from`: a file, or a directory copied recursively. Copying a
// thing onto itself (the same file or directory, by identity) does nothing.
void copy_atomically(const std::filesystem::path& from, const std::filesystem::path& to);

// Appends `line` (a whole line, '\n' included) to `file` (created if missing) with write(2) on
// an O_APPEND descriptor and fsyncs it before returning; a new file's folder is synced too (best
// effort). For append-only logs read line by line: a write that fails part-way is truncated back,
// so the next append never joins a torn line; a crash mid-write can still leave one, which the
// log's reader must skip (the next append starts a new line after it). Errors: vgen::Error naming the file and the step (io_error_kind).
void append_line_durably(const std::filesystem::path& file, std::string_view line);

// Removes the temporaries (and set-aside ".old-" directories) that a crashed writer left in
// `dir` (not recursing), skipping those whose writer process is still running (the pid in the
// name is alive on this host, this process included). Temporaries of an older vgen without a
// pid in the name are removed. Returns how many entries it removed; best effort: an entry that
// cannot be removed is skipped, and a missing `dir` sweeps nothing.
// Processes sharing `dir` from other hosts or pid namespaces are not told apart: sweep only
// folders that no such process writes to.
std::size_t sweep_temporaries(const std::filesystem::path& dir);

// The same, limited to the temporaries of one target (".<target name>.tmp-*", ".old-*").
std::size_t sweep_temporaries_of(const std::filesystem::path& target);

// Whether `filename` is a name this component gives temporaries (of any target).
bool is_temporary_name(std::string_view filename) noexcept;

}  // namespace vgen
