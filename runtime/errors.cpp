#include "runtime/errors.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>
#include <new>

namespace vgen {

std::string_view to_string(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::invalid_argument: return "invalid_argument";
    case ErrorKind::not_found: return "not_found";
    case ErrorKind::already_exists: return "already_exists";
    case ErrorKind::overloaded: return "overloaded";
    case ErrorKind::cancelled: return "cancelled";
    case ErrorKind::deadline_exceeded: return "deadline_exceeded";
    case ErrorKind::transient: return "transient";
    case ErrorKind::out_of_memory: return "out_of_memory";
    case ErrorKind::internal: return "internal";
  }
  return "internal";
}

Error::Error(ErrorKind kind, std::string message)
    : std::runtime_error(std::move(message)), kind_(kind) {}

void throw_error(ErrorKind kind, std::string message) { throw Error(kind, std::move(message)); }

bool is_retryable(ErrorKind kind) noexcept {
  return kind == ErrorKind::transient || kind == ErrorKind::out_of_memory;
}

ErrorKind classify(const std::exception_ptr& error) noexcept {
  if (!error) return ErrorKind::internal;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.kind();
  } catch (const boost::system::system_error& e) {
    if (e.code() == boost::asio::error::operation_aborted) return ErrorKind::cancelled;
    if (e.code() == boost::asio::error::timed_out) return ErrorKind::deadline_exceeded;
    return ErrorKind::internal;
  } catch (const std::bad_alloc&) {
    return ErrorKind::out_of_memory;
  } catch (const std::invalid_argument&) {
    return ErrorKind::invalid_argument;
  } catch (...) {
    return ErrorKind::internal;
  }
}

std::string describe(const std::exception_ptr& error) {
  if (!error) return "no error";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

int exit_code_for(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::invalid_argument:
    case ErrorKind::not_found:
    case ErrorKind::already_exists: return 2;
    case ErrorKind::cancelled: return 130;
    default: return 1;
  }
}

int http_status_for(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::invalid_argument: return 400;
    case ErrorKind::not_found: return 404;
    case ErrorKind::already_exists: return 409;
    case ErrorKind::overloaded: return 429;
    case ErrorKind::cancelled: return 409;
    case ErrorKind::deadline_exceeded: return 504;
    case ErrorKind::transient:
    case ErrorKind::out_of_memory: return 503;
    case ErrorKind::internal: return 500;
  }
  return 500;
}

std::string truncate_utf8(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t end = max_bytes;
  // text[end] is the first byte cut off: while it continues a character (10xxxxxx), that
  // character started before the cut, so cut before its lead byte instead.
  for (int back = 0; back < 3 && end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80; ++back) --end;
  return std::string(text.substr(0, end));
}

}  // namespace vgen
