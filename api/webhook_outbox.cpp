#include "api/webhook_outbox.hpp"

#include "api/sqlite_statement.hpp"
#include "runtime/errors.hpp"

#include <sqlite3.h>

namespace vgen {

namespace {

// Statements of this file, their errors prefixed "webhook outbox: ".
struct Statement : SqliteStatement {
  Statement(sqlite3* db, const char* sql) : SqliteStatement(db, sql, "webhook outbox") {}
};

constexpr const char* kColumns = "event_id, endpoint, type, body, state, attempts, created_unix, next_unix, last_error";

WebhookDelivery read_row(const Statement& s) {
  WebhookDelivery d;
  d.event_id = s.text(0);
  d.endpoint = s.text(1);
  d.type = s.text(2);
  d.body = s.text(3);
  const auto state = s.text(4);
  d.attempts.state = state == "delivered" ? WebhookState::delivered : state == "expired" ? WebhookState::expired : WebhookState::pending;
  d.attempts.attempts = static_cast<int>(s.integer(5));
  d.attempts.created_unix = s.real(6);
  d.attempts.next_unix = s.real(7);
  d.last_error = s.text(8);
  return d;
}

}  // namespace

WebhookOutbox::WebhookOutbox(const std::filesystem::path& file) : file_(file) {
  if (sqlite3_open_v2(file.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    throw_error(ErrorKind::invalid_argument, "webhook outbox " + file.string() + ": cannot be opened (" + why + ")");
  }
  sqlite3_busy_timeout(db_, 5000);  // the job journal may share the file (its own connection)
  try {
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");  // an event recorded is an event that will be sent, power loss or not
    exec("CREATE TABLE IF NOT EXISTS webhook_deliveries (event_id TEXT NOT NULL, endpoint TEXT NOT NULL, type TEXT NOT NULL, "
         "body TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0, "
         "created_unix REAL NOT NULL, next_unix REAL NOT NULL, last_error TEXT NOT NULL DEFAULT '', "
         "PRIMARY KEY (event_id, endpoint))");
    exec("CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries (state, next_unix)");
    exec("CREATE TABLE IF NOT EXISTS webhook_watches (subject_id TEXT PRIMARY KEY, created_unix REAL NOT NULL)");
  } catch (const Error& e) {
    sqlite3_close(db_);
    throw_error(ErrorKind::invalid_argument, "webhook outbox " + file.string() + ": " + e.what());
  }
}

WebhookOutbox::~WebhookOutbox() { sqlite3_close(db_); }

void WebhookOutbox::exec(const char* sql) const {
  char* err = nullptr;
  if (const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
    const std::string why = err ? err : "unknown error";
    sqlite3_free(err);
    throw_error(sqlite_error_kind(rc), "webhook outbox: " + why);
  }
}

std::vector<WebhookDelivery> WebhookOutbox::add(const std::string& event_id, const std::string& type, const std::string& body,
                                                double created_unix, const std::vector<std::string>& endpoints) {
  std::lock_guard lock(mutex_);
  std::vector<WebhookDelivery> added;
  exec("BEGIN IMMEDIATE");
  try {
    Statement s(db_, "INSERT OR IGNORE INTO webhook_deliveries (event_id, endpoint, type, body, created_unix, next_unix) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?5)");
    for (const auto& endpoint : endpoints) {
      s.bind(1, event_id).bind(2, endpoint).bind(3, type).bind(4, body).bind(5, created_unix);
      s.step();
      if (sqlite3_changes(db_) == 1) {
        WebhookDelivery d{.event_id = event_id, .endpoint = endpoint, .type = type, .body = body};
        d.attempts.created_unix = d.attempts.next_unix = created_unix;
        added.push_back(std::move(d));
      }
      s.reset();
    }
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  return added;
}

void WebhookOutbox::watch(const std::string& subject_id, double created_unix) {
  std::lock_guard lock(mutex_);
  Statement(db_, "INSERT OR IGNORE INTO webhook_watches (subject_id, created_unix) VALUES (?1, ?2)")
      .bind(1, subject_id)
      .bind(2, created_unix)
      .step();
}

bool WebhookOutbox::watched(const std::string& subject_id) const {
  std::lock_guard lock(mutex_);
  Statement s(db_, "SELECT 1 FROM webhook_watches WHERE subject_id = ?1");
  s.bind(1, subject_id);
  return s.step();
}

void WebhookOutbox::unwatch(const std::string& subject_id) {
  std::lock_guard lock(mutex_);
  Statement(db_, "DELETE FROM webhook_watches WHERE subject_id = ?1").bind(1, subject_id).step();
}

std::size_t WebhookOutbox::watches() const {
  std::lock_guard lock(mutex_);
  Statement s(db_, "SELECT COUNT(*) FROM webhook_watches");
  return s.step() ? static_cast<std::size_t>(s.integer(0)) : 0;
}

std::vector<WebhookDelivery> WebhookOutbox::pending() const {
  std::lock_guard lock(mutex_);
  Statement s(db_, (std::string("SELECT ") + kColumns + " FROM webhook_deliveries WHERE state = 'pending' ORDER BY next_unix").c_str());
  std::vector<WebhookDelivery> out;
  while (s.step()) out.push_back(read_row(s));
  return out;
}

void WebhookOutbox::update(const WebhookDelivery& d) {
  std::lock_guard lock(mutex_);
  Statement s(db_, "UPDATE webhook_deliveries SET state = ?3, attempts = ?4, next_unix = ?5, last_error = ?6 "
                   "WHERE event_id = ?1 AND endpoint = ?2");
  s.bind(1, d.event_id).bind(2, d.endpoint).bind(3, std::string(to_string(d.attempts.state)));
  s.bind(4, static_cast<std::int64_t>(d.attempts.attempts)).bind(5, d.attempts.next_unix).bind(6, d.last_error);
  s.step();
}

std::size_t WebhookOutbox::prune(double before_unix) {
  std::lock_guard lock(mutex_);
  Statement s(db_, "DELETE FROM webhook_deliveries WHERE state != 'pending' AND created_unix < ?1");
  s.bind(1, before_unix);
  s.step();
  return static_cast<std::size_t>(sqlite3_changes(db_));
}

std::size_t WebhookOutbox::count(WebhookState state) const {
  std::lock_guard lock(mutex_);
  Statement s(db_, "SELECT COUNT(*) FROM webhook_deliveries WHERE state = ?1");
  s.bind(1, std::string(to_string(state)));
  return s.step() ? static_cast<std::size_t>(s.integer(0)) : 0;
}

}  // namespace vgen
