#include "runtime/trace.hpp"

#include <doctest/doctest.h>

#include <boost/json/parse.hpp>

#include <boost/json/serialize.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

namespace json = boost::json;
using vgen::Tracer;
using namespace std::chrono_literals;

const json::array& events_of(const json::value& trace) { return trace.at("traceEvents").as_array(); }

std::vector<json::object> named(const json::value& trace, std::string_view name) {
  std::vector<json::object> out;
  for (const auto& e : events_of(trace))
    if (e.at("name").as_string() == name) out.push_back(e.as_object());
  return out;
}

std::string track_name(const json::value& trace, std::int64_t pid, std::int64_t tid) {
  for (const auto& e : events_of(trace))
    if (e.at("ph").as_string() == "M" && e.at("name").as_string() == "thread_name" && e.at("pid").to_number<std::int64_t>() == pid &&
        e.at("tid").to_number<std::int64_t>() == tid)
      return std::string(e.at("args").at("name").as_string());
  return {};
}

}  // namespace

TEST_CASE("nothing is recorded until a capture begins") {
  Tracer t;
  CHECK_FALSE(t.enabled());
  const auto now = Tracer::clock::now();
  t.span("stages", "denoise worker 0", "denoise", now, now + 1ms);
  { vgen::TraceSpan s(&t, "device:cpu", "step"); }
  const auto start = t.begin();
  CHECK(t.enabled());
  const auto trace = t.end(start);
  CHECK_FALSE(t.enabled());
  CHECK(named(trace, "denoise").empty());
  CHECK(named(trace, "step").empty());
  CHECK(vgen::check_trace_json(trace).empty());
}

TEST_CASE("spans carry their track, times and args, and the trace passes the schema check") {
  Tracer t;
  const auto start = t.begin();
  const auto a = Tracer::clock::now();
  t.span("stages", "denoise worker 1", "denoise", a, a + 2500us, {{"job", "j1"}});
  t.instant("jobs", "job j1", "retry", a + 1ms, {{"error", "out of memory"}});
  { vgen::TraceSpan s(&t, "device:cpu", "denoise step", {{"batch", 4}, {"step", 0}}); }
  const auto trace = t.end(start);
  INFO(json::serialize(trace));
  CHECK(vgen::check_trace_json(trace).empty());

  const auto spans = named(trace, "denoise");
  REQUIRE(spans.size() == 1);
  CHECK(spans[0].at("ph").as_string() == "X");
  CHECK(spans[0].at("dur").to_number<double>() == doctest::Approx(2500.0));
  CHECK(spans[0].at("args").at("job").as_string() == "j1");
  CHECK(track_name(trace, spans[0].at("pid").to_number<std::int64_t>(), spans[0].at("tid").to_number<std::int64_t>()) ==
        "denoise worker 1");

  const auto retries = named(trace, "retry");
  REQUIRE(retries.size() == 1);
  CHECK(retries[0].at("ph").as_string() == "i");
  CHECK(retries[0].at("ts").to_number<double>() - spans[0].at("ts").to_number<double>() == doctest::Approx(1000.0));

  const auto steps = named(trace, "denoise step");
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].at("args").at("batch").to_number<int>() == 4);
  CHECK(track_name(trace, steps[0].at("pid").to_number<std::int64_t>(), steps[0].at("tid").to_number<std::int64_t>()) ==
        "device:cpu thread 0");
  // Three processes, each named.
  CHECK(named(trace, "process_name").size() == 3);
}

TEST_CASE("each thread gets its own track under a prefix" * doctest::timeout(30)) {
  Tracer t;
  const auto start = t.begin();
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i) threads.emplace_back([&] { vgen::TraceSpan s(&t, "device:cpu", "step"); });
    for (auto& th : threads) th.join();
  }
  { vgen::TraceSpan s(&t, "device:cpu", "step"); }  // the main thread: a fourth track
  const auto trace = t.end(start);
  CHECK(vgen::check_trace_json(trace).empty());
  std::set<std::string> tracks;
  for (const auto& s : named(trace, "step"))
    tracks.insert(track_name(trace, s.at("pid").to_number<std::int64_t>(), s.at("tid").to_number<std::int64_t>()));
  // Thread ids of joined threads may be reused, so 4..7 tracks; never one shared by two live threads.
  CHECK(tracks.size() >= 4);
  CHECK(tracks.count("device:cpu thread 0"));
}

TEST_CASE("a capture returns only what ended inside it; the buffer goes when the last capture ends") {
  Tracer t;
  const auto outer = t.begin();
  const auto a = Tracer::clock::now();
  t.span("stages", "encode worker 0", "early", a, a + 1us);
  std::this_thread::sleep_for(2ms);  // timestamps must differ; not synchronisation
  const auto inner = t.begin();
  const auto b = Tracer::clock::now();
  t.span("stages", "encode worker 0", "late", b, b + 1us);
  const auto second = t.end(inner);
  CHECK(named(second, "early").empty());
  CHECK(named(second, "late").size() == 1);
  const auto first = t.end(outer);
  CHECK(named(first, "early").size() == 1);
  CHECK(named(first, "late").size() == 1);
  // Nothing survives the last capture.
  const auto again = t.begin();
  CHECK(named(t.end(again), "late").empty());
}

TEST_CASE("the buffer is bounded and says how much it dropped") {
  Tracer t(3);
  const auto start = t.begin();
  const auto a = Tracer::clock::now();
  for (int i = 0; i < 5; ++i) t.span("stages", "w", "s", a, a);
  const auto trace = t.end(start);
  CHECK(named(trace, "s").size() == 3);
  CHECK(trace.at("droppedEvents").to_number<int>() == 2);
}

TEST_CASE("end_to_file writes parseable trace JSON") {
  Tracer t;
  const auto start = t.begin();
  const auto a = Tracer::clock::now();
  t.span("jobs", "job x", "queued denoise", a, a + 5us);
  const auto file = std::filesystem::temp_directory_path() / ("vgen-trace-test-" + std::to_string(::getpid()) + ".json");
  t.end_to_file(start, file);
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(file);
  const auto trace = json::parse(text.str());
  CHECK(vgen::check_trace_json(trace).empty());
  CHECK(named(trace, "queued denoise").size() == 1);
}

TEST_CASE("the schema check finds what Perfetto would reject") {
  CHECK_FALSE(vgen::check_trace_json(json::parse("[]")).empty());
  CHECK_FALSE(vgen::check_trace_json(json::parse(R"({"traceEvents":[{"name":"a","ph":"X","pid":1,"tid":1,"ts":0}]})")).empty());
  CHECK_FALSE(vgen::check_trace_json(json::parse(R"({"traceEvents":[{"name":"a","ph":"X","pid":1,"tid":1,"ts":0,"dur":1}]})")).empty());
  CHECK(vgen::check_trace_json(json::parse(
            R"({"traceEvents":[{"name":"a","ph":"X","pid":1,"tid":1,"ts":0,"dur":1},
                {"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"w"}}]})"))
            .empty());
}
