// The webhook outbox: a recorded delivery is pending until updated, survives reopening (a new
// process after a crash) with its event id and exact body, and recording the same event again
// (a job that ends again after a resume) adds nothing; pruning drops only settled rows.
#include "api/webhook_outbox.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

using namespace vgen;

TEST_CASE("deliveries are pending until settled, across reopening") {
  test::TempDir dir;
  const auto file = dir / "outbox.db";
  {
    WebhookOutbox box(file);
    const auto added = box.add("evt_1", "video.completed", R"({"id":"evt_1"})", 100, {"http://a/", "http://b/"});
    CHECK(added.size() == 2);
    CHECK(box.add("evt_1", "video.failed", "{}", 200, {"http://a/", "http://c/"}).size() == 1);  // only c is new
    CHECK(box.add("evt_2", "video.failed", R"({"id":"evt_2"})", 50, {"http://a/"}).size() == 1);
    CHECK(box.count(WebhookState::pending) == 4);
  }
  WebhookOutbox box(file);  // as a restarted process sees it
  auto pending = box.pending();
  REQUIRE(pending.size() == 4);
  CHECK(pending.front().event_id == "evt_2");  // the earliest due first
  auto first = pending[1];
  CHECK(first.event_id == "evt_1");
  CHECK(first.type == "video.completed");  // the first record stands
  CHECK(first.body == R"({"id":"evt_1"})");
  CHECK(first.attempts.created_unix == doctest::Approx(100));

  first.attempts.state = WebhookState::delivered;
  first.attempts.attempts = 2;
  box.update(first);
  auto later = pending[0];
  later.attempts.attempts = 1;
  later.attempts.next_unix = 999;
  later.last_error = "HTTP 503";
  box.update(later);
  pending = box.pending();
  REQUIRE(pending.size() == 3);
  CHECK(pending.back().event_id == "evt_2");
  CHECK(pending.back().attempts.attempts == 1);
  CHECK(pending.back().last_error == "HTTP 503");
  CHECK(box.count(WebhookState::delivered) == 1);
  // A settled pair recorded again stays settled.
  CHECK(box.add("evt_1", "video.completed", "{}", 100, {first.endpoint}).empty());
  CHECK(box.count(WebhookState::delivered) == 1);
  // Pruning drops settled rows created before the time given, never pending ones.
  CHECK(box.prune(100) == 0);   // evt_1 was created at 100: not before
  CHECK(box.prune(1000) == 1);  // evt_1's delivered row; evt_2 (created at 50) is still pending
  CHECK(box.count(WebhookState::delivered) == 0);
  CHECK(box.count(WebhookState::pending) == 3);
}

TEST_CASE("an outbox that cannot be created is refused by name") {
  CHECK_THROWS_WITH(WebhookOutbox("/nonexistent-dir/x/outbox.db"), doctest::Contains("/nonexistent-dir/x/outbox.db"));
}

TEST_CASE("watches: added once, asked, removed, kept across reopening") {
  test::TempDir dir;
  {
    WebhookOutbox box(dir / "outbox.db");
    box.watch("a", 1);
    box.watch("a", 2);
    box.watch("b", 3);
    CHECK(box.watches() == 2);
    box.unwatch("b");
    box.unwatch("never");
  }
  WebhookOutbox box(dir / "outbox.db");
  CHECK(box.watched("a"));
  CHECK_FALSE(box.watched("b"));
  CHECK(box.watches() == 1);
}
