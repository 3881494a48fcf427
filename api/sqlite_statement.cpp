#include "api/sqlite_statement.hpp"

#include <sqlite3.h>

namespace vgen {

ErrorKind sqlite_error_kind(int rc) {
  switch (rc & 0xff) {  // the primary result code of an extended one
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return ErrorKind::transient;
    default: return ErrorKind::internal;
  }
}

SqliteStatement::SqliteStatement(sqlite3* db, const char* sql, std::string what) : db_(db), what_(std::move(what)) {
  if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK)
    throw_error(ErrorKind::internal, what_ + ": preparing statement: " + sqlite3_errmsg(db));
}

SqliteStatement::~SqliteStatement() { sqlite3_finalize(stmt_); }

SqliteStatement& SqliteStatement::bind(int i, const std::string& s) {
  sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  return *this;
}

SqliteStatement& SqliteStatement::bind(int i, double d) {
  sqlite3_bind_double(stmt_, i, d);
  return *this;
}

SqliteStatement& SqliteStatement::bind(int i, std::int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}

bool SqliteStatement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw_error(sqlite_error_kind(rc), what_ + ": " + sqlite3_errmsg(db_));
}

void SqliteStatement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string SqliteStatement::text(int col) const {
  const auto* p = sqlite3_column_text(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)))
           : std::string();
}

std::int64_t SqliteStatement::integer(int col) const { return sqlite3_column_int64(stmt_, col); }
double SqliteStatement::real(int col) const { return sqlite3_column_double(stmt_, col); }
int SqliteStatement::columns() const { return sqlite3_column_count(stmt_); }

}  // namespace vgen
