// Typed errors that cross a boundary (stage -> job result, library -> HTTP, CLI -> exit code).
//
// Inside coroutines we throw; at each boundary the exception is turned into an ErrorKind once,
// here, and mapped to an exit code or an HTTP status in exactly one place (exit_code_for,
// http_status_for). Thread-safety: everything here is stateless or immutable.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace vgen {

enum class ErrorKind {
  invalid_argument,   // the caller's input is wrong (a field, a file, a flag): never retried
  not_found,          // a named thing (job id, model file) does not exist
  already_exists,     // a name the caller chose (job id, output name) is taken
  overloaded,         // queue full / shutting down: try again later
  cancelled,          // the job or operation was cancelled
  deadline_exceeded,  // the job's deadline passed
  transient,          // a failure that may succeed when retried (device busy, I/O hiccup)
  out_of_memory,      // a device ran out of memory: retry smaller or elsewhere
  internal,           // a bug or an unexpected failure
};

std::string_view to_string(ErrorKind kind) noexcept;

// The one exception type the runtime throws for classified failures.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message);
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] void throw_error(ErrorKind kind, std::string message);

// Whether a retry may help. transient and out_of_memory are retryable; everything else is not.
bool is_retryable(ErrorKind kind) noexcept;

// Classify any exception: vgen::Error keeps its kind, boost::system cancellation becomes
// `cancelled`, std::bad_alloc becomes `out_of_memory`, std::invalid_argument becomes
// `invalid_argument`, anything else `internal`.
ErrorKind classify(const std::exception_ptr& error) noexcept;
std::string describe(const std::exception_ptr& error);

// The single mapping to process exit codes: 0 ok, 2 bad input, 1 any other failure,
// 130 cancelled (as a shell reports SIGINT).
int exit_code_for(ErrorKind kind) noexcept;

// The single mapping to HTTP status codes.
int http_status_for(ErrorKind kind) noexcept;

// `text` cut to at most `max_bytes` bytes without splitting a UTF-8 character: the cut backs up
// to the start of the character it would have split, so a cut message stays valid UTF-8 (and a
// JSON error body or journal record built from it stays valid JSON). Backs up at most 3 bytes,
// so bytes that are not UTF-8 are cut like any other. Use it for every shortened message or text.
std::string truncate_utf8(std::string_view text, std::size_t max_bytes);

}  // namespace vgen
