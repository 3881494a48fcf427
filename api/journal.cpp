#include "api/journal.hpp"

#include "api/sqlite_statement.hpp"
#include "runtime/errors.hpp"

#include <boost/json.hpp>
#include <sqlite3.h>

#include <algorithm>
#include <mutex>
#include <set>

namespace vgen {

namespace json = boost::json;

namespace {

// Statements of this file, their errors prefixed "journal: ".
struct Statement : SqliteStatement {
  Statement(sqlite3* db, const char* sql) : SqliteStatement(db, sql, "journal") {}
};

constexpr const char* kColumns =
    "id, key, spec, status, output, output_bytes, content_type, error_kind, error, seconds, retries, cache_hit, "
    "COALESCE((julianday(finished_at) - 2440587.5) * 86400.0, 0), attempts, step, total, checkpoint";

JournalRecord read_row(const Statement& s) {
  JournalRecord r;
  r.id = s.text(0);
  r.key = s.text(1);
  boost::system::error_code ec;
  auto spec = json::parse(s.text(2), ec);
  if (!ec && spec.is_object()) r.spec = std::move(spec.get_object());
  r.status = s.text(3);
  r.output = s.text(4);
  r.output_bytes = static_cast<std::uint64_t>(s.integer(5));
  r.content_type = s.text(6);
  r.error_kind = s.text(7);
  r.error = s.text(8);
  r.seconds = s.real(9);
  r.retries = static_cast<int>(s.integer(10));
  r.cache_hit = s.integer(11) != 0;
  r.finished_unix = s.real(12);
  r.attempts = static_cast<int>(s.integer(13));
  r.step = static_cast<int>(s.integer(14));
  r.total = static_cast<int>(s.integer(15));
  r.checkpoint = s.text(16);
  return r;
}

}  // namespace

Journal::Journal(const std::filesystem::path& file) : file_(file) {
  if (sqlite3_open_v2(file.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    throw_error(ErrorKind::invalid_argument, "journal " + file.string() + ": cannot be opened (" + why + ")");
  }
  sqlite3_busy_timeout(db_, 5000);
  try {
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");  // a row acknowledged to a client survives power loss too
    exec("CREATE TABLE IF NOT EXISTS jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, key TEXT, "
         "spec TEXT, status TEXT NOT NULL, output TEXT DEFAULT '', output_bytes INTEGER DEFAULT 0, content_type TEXT DEFAULT '', "
         "error_kind TEXT DEFAULT '', error TEXT DEFAULT '', seconds REAL DEFAULT 0, retries INTEGER DEFAULT 0, "
         "cache_hit INTEGER DEFAULT 0, submitted_at TEXT DEFAULT CURRENT_TIMESTAMP, finished_at TEXT)");
    add_missing_columns();
    exec("CREATE INDEX IF NOT EXISTS jobs_by_key ON jobs (key, status)");
    exec("CREATE INDEX IF NOT EXISTS jobs_by_output ON jobs (output, status)");
  } catch (const Error& e) {
    sqlite3_close(db_);
    throw_error(ErrorKind::invalid_argument, "journal " + file.string() + ": " + e.what());
  }
}

Journal::~Journal() { sqlite3_close(db_); }

void Journal::exec(const char* sql) const {
  char* err = nullptr;
  if (const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
    const std::string why = err ? err : "unknown error";
    sqlite3_free(err);
    throw_error(sqlite_error_kind(rc), std::string("journal: ") + why);
  }
}

// Columns added after the first release: a journal written by an earlier vgen gains them.
void Journal::add_missing_columns() {
  std::set<std::string> have;
  {
    Statement s(db_, "PRAGMA table_info(jobs)");
    while (s.step()) have.insert(s.text(1));
  }
  for (const char* column : {"attempts", "step", "total"})
    if (!have.count(column)) exec((std::string("ALTER TABLE jobs ADD COLUMN ") + column + " INTEGER DEFAULT 0").c_str());
  if (!have.count("checkpoint")) exec("ALTER TABLE jobs ADD COLUMN checkpoint TEXT DEFAULT ''");
}

void Journal::record_accepted(const std::string& id, const std::string& key, const json::object& spec) {
  std::lock_guard lock(mutex_);
  Statement s(db_, "INSERT OR REPLACE INTO jobs (id, key, spec, status) VALUES (?, ?, ?, 'queued')");
  s.bind(1, id).bind(2, key).bind(3, json::serialize(spec)).step();
}

int Journal::claim(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement(db_, "UPDATE jobs SET status='running', attempts=attempts+1 WHERE id=? AND status IN ('queued', 'running')")
      .bind(1, id)
      .step();
  Statement s(db_, "SELECT attempts FROM jobs WHERE id=?");
  s.bind(1, id);
  return s.step() ? static_cast<int>(s.integer(0)) : 0;
}

void Journal::unclaim(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement(db_, "UPDATE jobs SET status='queued', attempts=MAX(attempts-1, 0) WHERE id=? AND status='running'").bind(1, id).step();
}

void Journal::record_progress(const std::string& id, int step, int total, const std::string& checkpoint) {
  std::lock_guard lock(mutex_);
  Statement s(db_, "UPDATE jobs SET step=?, total=?, checkpoint=? WHERE id=?");
  s.bind(1, static_cast<std::int64_t>(step)).bind(2, static_cast<std::int64_t>(total)).bind(3, checkpoint).bind(4, id).step();
}

std::optional<JobRecord> Journal::find_done(const std::string& key) const {
  return find_one("key=? AND status='done' ORDER BY seq DESC LIMIT 1", key);
}

void Journal::record_finished(const JournalRecord& r) {
  std::lock_guard lock(mutex_);
  Statement s(db_, "UPDATE jobs SET status=?, output=?, output_bytes=?, content_type=?, error_kind=?, error=?, seconds=?, "
                   "retries=?, cache_hit=?, checkpoint='', finished_at=strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id=?");
  s.bind(1, r.status).bind(2, r.output).bind(3, static_cast<std::int64_t>(r.output_bytes)).bind(4, r.content_type);
  s.bind(5, r.error_kind).bind(6, r.error).bind(7, r.seconds).bind(8, static_cast<std::int64_t>(r.retries));
  s.bind(9, static_cast<std::int64_t>(r.cache_hit)).bind(10, r.id).step();
}

void Journal::forget(const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement(db_, "DELETE FROM jobs WHERE id=?").bind(1, id).step();
}

std::optional<JournalRecord> Journal::find(const std::string& id) const { return find_one("id=?", id); }

// The first row of "SELECT ... FROM jobs WHERE <where>" with `value` bound to its one '?'.
std::optional<JobRecord> Journal::find_one(const char* where, const std::string& value) const {
  std::lock_guard lock(mutex_);
  Statement s(db_, (std::string("SELECT ") + kColumns + " FROM jobs WHERE " + where).c_str());
  s.bind(1, value);
  if (!s.step()) return std::nullopt;
  return read_row(s);
}

std::optional<JobRecord> Journal::find_output(const std::string& output) const {
  return find_one("output=? AND status='done' ORDER BY seq DESC LIMIT 1", output);
}

std::vector<JournalRecord> Journal::unfinished() const {
  std::lock_guard lock(mutex_);
  Statement s(db_, (std::string("SELECT ") + kColumns + " FROM jobs WHERE status IN ('queued', 'running') ORDER BY seq").c_str());
  std::vector<JournalRecord> out;
  while (s.step()) out.push_back(read_row(s));
  return out;
}

void Journal::mark_unfinished_interrupted() {
  std::lock_guard lock(mutex_);
  exec("UPDATE jobs SET status='interrupted', finished_at=strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE status IN ('queued', 'running')");
}

JobPage Journal::list(const JobListQuery& query) const {
  std::lock_guard lock(mutex_);
  // One row more than the page: whether it exists says if there is a next page.
  Statement s(db_, (std::string("SELECT ") + kColumns + ", seq FROM jobs WHERE (?1 = 0 OR seq < ?1) AND (?2 = '' OR status = ?2) "
                                                       "ORDER BY seq DESC LIMIT ?3").c_str());
  const auto limit = static_cast<std::int64_t>(std::clamp<std::size_t>(query.limit, 1, 1u << 20));
  s.bind(1, static_cast<std::int64_t>(query.before)).bind(2, query.status).bind(3, limit + 1);
  JobPage page;
  std::int64_t last = 0;
  while (s.step()) {
    if (static_cast<std::int64_t>(page.jobs.size()) == limit) {
      page.next = static_cast<std::uint64_t>(last);
      break;
    }
    page.jobs.push_back(read_row(s));
    last = s.integer(s.columns() - 1);  // seq, after kColumns (whatever columns those gain)
  }
  return page;
}

std::uint64_t Journal::max_job_number(const std::string& prefix) const {
  std::lock_guard lock(mutex_);
  Statement s(db_, "SELECT id FROM jobs WHERE id LIKE ? || '%'");
  s.bind(1, prefix);
  std::uint64_t best = 0;
  while (s.step()) {
    const auto id = s.text(0);
    try {
      std::size_t used = 0;
      const auto n = std::stoull(id.substr(prefix.size()), &used);
      if (used == id.size() - prefix.size()) best = std::max<std::uint64_t>(best, n);
    } catch (...) {
    }
  }
  return best;
}

void register_builtin_job_stores() {
  static std::once_flag once;
  std::call_once(once, [] {
    job_stores().add("sqlite", [](const std::filesystem::path& file) { return std::make_unique<Journal>(file); });
  });
}

}  // namespace vgen
