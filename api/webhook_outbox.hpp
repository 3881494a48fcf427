// WebhookOutbox: the durable record of webhook deliveries (one row per event and endpoint), a
// SQLite table "webhook_deliveries" (WAL, synchronous=FULL) in its own file or beside the
// job journal's table in the journal's file. An event is added, and fsynced, before its first
// send; a row stays pending until an attempt is acknowledged (2xx) or it is too old, so a
// process that dies with a delivery unacknowledged sends it again after a restart, under the
// same event id (the receiver's webhook-id dedup makes that exactly once for it).
// Adding an (event, endpoint) pair recorded before changes nothing: a job that ends again after
// a crash (resumed) does not produce a second delivery.
// Watches (table "webhook_watches"): subjects whose end this process must announce although it
// does not run them (a fleet front end's submitted jobs, api/fleet/fleet_client.hpp), recorded
// before the job exists anywhere else and removed once its event is added: a restart finds
// which ends are still owed.
// Thread-safety: one connection behind a mutex; every member may be called from any thread.
// Every call blocks on the file (add and update fsync).
#pragma once

#include "api/webhook_retry.hpp"

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

struct sqlite3;

namespace vgen {

struct WebhookDelivery {
  std::string event_id, endpoint, type, body;  // endpoint: the URL; body: the exact bytes signed and sent
  WebhookAttempts attempts;
  std::string last_error;
};

class WebhookOutbox {
 public:
  // Opens or creates the file and its table (Error(invalid_argument) naming it if it cannot).
  explicit WebhookOutbox(const std::filesystem::path& file);
  ~WebhookOutbox();
  WebhookOutbox(const WebhookOutbox&) = delete;
  WebhookOutbox& operator=(const WebhookOutbox&) = delete;

  // One pending row per endpoint, in one transaction; returns the rows that were new (a pair
  // already recorded is left as it was). Error(transient) when the file cannot be written.
  std::vector<WebhookDelivery> add(const std::string& event_id, const std::string& type, const std::string& body,
                                   double created_unix, const std::vector<std::string>& endpoints);
  // Watches: add (a subject already watched stays as it was), ask, remove, count.
  void watch(const std::string& subject_id, double created_unix);
  bool watched(const std::string& subject_id) const;
  void unwatch(const std::string& subject_id);
  std::size_t watches() const;
  // Every pending delivery, the earliest due first.
  std::vector<WebhookDelivery> pending() const;
  // Writes a delivery's state, attempts, next attempt and last error (by event id and endpoint).
  void update(const WebhookDelivery& d);
  // Deletes the delivered and expired rows of events created before `before_unix`; returns how
  // many (pending rows are never deleted). Keeps the file from growing with every event.
  std::size_t prune(double before_unix);
  // Rows in `state` (all endpoints).
  std::size_t count(WebhookState state) const;
  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  void exec(const char* sql) const;
  std::filesystem::path file_;
  sqlite3* db_ = nullptr;
  mutable std::mutex mutex_;
};

}  // namespace vgen
