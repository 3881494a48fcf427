// SqliteStatement: one prepared SQLite statement, finalized on scope exit, with the binds and
// column reads the journal (api/journal.hpp) and the webhook outbox (api/webhook_outbox.hpp) use,
// and SQLite result codes mapped to vgen's error kinds in one place.
//
// Ownership: borrows the sqlite3 connection (which must outlive it), owns the statement.
// Thread-safety: none; use it on the thread (or under the lock) that owns the connection.
// Blocking: step() does the statement's I/O synchronously. Nothing here is cancellable.
// Errors: Error(internal) for a statement that does not prepare; for a failed step,
// Error(transient) when the disk is full, an I/O error or a busy/locked file (a retry may pass),
// Error(internal) otherwise. Messages start with the owner's `what` ("journal: ...").
#pragma once

#include "runtime/errors.hpp"

#include <cstdint>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace vgen {

// A SQLite result code (primary or extended) as an error kind, as the header says.
ErrorKind sqlite_error_kind(int rc);

class SqliteStatement {
 public:
  SqliteStatement(sqlite3* db, const char* sql, std::string what);
  ~SqliteStatement();
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  SqliteStatement& bind(int i, const std::string& s);
  SqliteStatement& bind(int i, double d);
  SqliteStatement& bind(int i, std::int64_t v);
  bool step();   // true while a row is available
  void reset();  // rewinds and clears the binds, for running the statement again

  std::string text(int col) const;  // "" for NULL
  std::int64_t integer(int col) const;
  double real(int col) const;
  int columns() const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string what_;
};

}  // namespace vgen
