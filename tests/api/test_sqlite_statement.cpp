// SqliteStatement: binds and reads round-trip every type, a statement runs again after reset(),
// a bad statement or a failed step is a vgen Error naming its owner, and result codes map to
// error kinds (a full disk or a busy file may pass; a constraint is a bug).
#include "api/sqlite_statement.hpp"

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <memory>

using namespace vgen;

namespace {
struct Db {
  sqlite3* db = nullptr;
  Db() { REQUIRE(sqlite3_open(":memory:", &db) == SQLITE_OK); }
  ~Db() { sqlite3_close(db); }
};
}  // namespace

TEST_CASE("binds and columns round-trip; reset runs the statement again") {
  Db d;
  SqliteStatement(d.db, "CREATE TABLE t (s TEXT, r REAL, i INTEGER UNIQUE)", "test").step();
  SqliteStatement insert(d.db, "INSERT INTO t VALUES (?, ?, ?)", "test");
  CHECK_FALSE(insert.bind(1, std::string("a\0b", 3)).bind(2, 2.5).bind(3, std::int64_t{1} << 40).step());
  insert.reset();
  CHECK_FALSE(insert.bind(1, std::string("c")).bind(2, -1.0).bind(3, std::int64_t{7}).step());
  SqliteStatement select(d.db, "SELECT s, r, i, NULL FROM t ORDER BY i DESC", "test");
  CHECK(select.columns() == 4);
  REQUIRE(select.step());
  CHECK(select.text(0) == std::string("a\0b", 3));  // embedded NUL kept
  CHECK(select.real(1) == 2.5);
  CHECK(select.integer(2) == (std::int64_t{1} << 40));
  CHECK(select.text(3).empty());  // NULL
  REQUIRE(select.step());
  CHECK(select.text(0) == "c");
  CHECK_FALSE(select.step());
}

TEST_CASE("errors name the owner and carry the right kind") {
  Db d;
  try {
    SqliteStatement(d.db, "SELEC nonsense", "journal");
    FAIL("a bad statement prepared");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::internal);
    CHECK(std::string(e.what()).rfind("journal: preparing statement:", 0) == 0);
  }
  SqliteStatement(d.db, "CREATE TABLE t (i INTEGER UNIQUE)", "outbox").step();
  SqliteStatement(d.db, "INSERT INTO t VALUES (1)", "outbox").step();
  try {
    SqliteStatement(d.db, "INSERT INTO t VALUES (1)", "outbox").step();
    FAIL("a duplicate went in");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::internal);  // a constraint: a bug, not a retry
    CHECK(std::string(e.what()).rfind("outbox: ", 0) == 0);
  }
  CHECK(sqlite_error_kind(SQLITE_FULL) == ErrorKind::transient);
  CHECK(sqlite_error_kind(SQLITE_BUSY) == ErrorKind::transient);
  CHECK(sqlite_error_kind(SQLITE_IOERR_WRITE) == ErrorKind::transient);  // extended codes too
  CHECK(sqlite_error_kind(SQLITE_CORRUPT) == ErrorKind::internal);
}
