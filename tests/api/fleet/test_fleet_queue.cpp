#include "api/fleet/fleet_queue.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <doctest/doctest.h>

using namespace vgen;
namespace json = boost::json;

namespace {

std::string refusal(const std::string& text) {
  try {
    parse_queue_config(json::parse(text).as_object(), "cfg.json: ");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("queue config: defaults, overrides, and a round trip through JSON") {
  const QueueConfig d;
  CHECK(d.url.empty());
  CHECK(d.max_crashes == 2);
  const auto c = parse_queue_config(json::parse(R"({"url": "nats://10.0.0.1:4222", "ack_wait_ms": 3000,
      "backoff_ms": [100, 200], "max_crashes": 3, "max_pending": 30, "stream": "S", "bucket": "b"})").as_object(), "");
  CHECK(c.url == "nats://10.0.0.1:4222");
  CHECK(c.ack_wait == std::chrono::milliseconds(3000));
  REQUIRE(c.backoff.size() == 2);
  CHECK(c.backoff[1] == std::chrono::milliseconds(200));
  CHECK(c.max_crashes == 3);
  CHECK(c.max_pending == 30);
  const auto again = parse_queue_config(to_json(c), "");
  CHECK(json::serialize(to_json(again)) == json::serialize(to_json(c)));
}

TEST_CASE("queue config: each bad key is refused by name") {
  CHECK(refusal(R"({"url": "http://x:1"})").find("cfg.json: queue.url: must start with nats://") == 0);
  CHECK(refusal(R"({"ack_wait_ms": 10})").find("queue.ack_wait_ms: must be in [500") != std::string::npos);
  CHECK(refusal(R"({"stream": "a.b"})").find("queue.stream: 'a.b' may hold only") != std::string::npos);
  CHECK(refusal(R"({"subject_prefix": "a.>"})").find("queue.subject_prefix") != std::string::npos);
  CHECK(refusal(R"({"max_crashes": 0})").find("queue.max_crashes") != std::string::npos);
  CHECK(refusal(R"({"backoff_ms": 5})").find("queue.backoff_ms: must be an array") != std::string::npos);
  CHECK(refusal(R"({"nope": 1})").find("queue.nope: unknown key (known: ack_wait_ms") != std::string::npos);
}

TEST_CASE("subjects: one per model, a model name made a safe token, jobs without a model on 'default'") {
  QueueConfig c;
  CHECK(job_subject(c, "") == "vgen.jobs.default");
  CHECK(job_subject(c, "wan-tiny") == "vgen.jobs.wan-tiny");
  CHECK(job_subject(c, "a.b c>*") == "vgen.jobs.a_b_c__");
  CHECK(consumer_name(c, "wan-tiny") == "VGEN_JOBS_wan-tiny");
  CHECK(cancel_subject(c, "0190") == "vgen.cancel.0190");
}

TEST_CASE("fleet record: every field survives JSON; a bad text is refused") {
  FleetRecord r;
  r.id = "0190abc";
  r.model = "m";
  r.status = "done";
  r.worker = "w1";
  r.step = 4;
  r.total = 4;
  r.attempts = 2;
  r.returned = 1;
  r.writes = 2;
  r.output = "/shared/0190abc.mp4";
  r.content_type = "video/mp4";
  r.device = "cpu";
  r.key = "5f0e";
  r.output_bytes = 123456789012;
  r.seconds = 1.5;
  r.finished_unix = 1700000000.25;
  r.spec = json::object{{"prompt", "p"}, {"name", "0190abc"}};
  const auto back = parse_fleet_record(json::serialize(to_json(r)));
  CHECK(json::serialize(to_json(back)) == json::serialize(to_json(r)));
  CHECK(back.key == "5f0e");
  CHECK(back.output_bytes == 123456789012u);
  CHECK(is_final(back));
  r.status = "running";
  CHECK_FALSE(is_final(r));
  CHECK_THROWS_AS(parse_fleet_record("[1]"), Error);
  CHECK_THROWS_AS(parse_fleet_record(R"({"status": "done"})"), Error);  // no id
}
