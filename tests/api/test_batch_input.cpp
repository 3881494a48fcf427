// Batch input: prompt text and JSONL become items with line numbers, names and per-line errors.
#include "api/batch_input.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <string>

using namespace vgen;
namespace json = boost::json;

TEST_CASE("prompt text: one job per line, comments and blank lines skipped, CRLF trimmed") {
  const auto items = parse_batch_text("# a comment\r\n\r\n  a red circle moving left  \r\nA Blue Square!\n\n");
  REQUIRE(items.size() == 2);
  CHECK(items[0].line == 3);
  CHECK(items[0].error.empty());
  CHECK(items[0].name == "0003-a-red-circle-moving-left");
  CHECK(items[0].spec.at("prompt") == "a red circle moving left");
  CHECK(items[0].spec.at("name") == "0003-a-red-circle-moving-left");
  CHECK(items[1].line == 4);
  CHECK(items[1].name == "0004-a-blue-square");
}

TEST_CASE("JSONL: detected from the first line or forced; defaults apply under each line's fields") {
  const json::object defaults{{"steps", 4}, {"width", 32}};
  const auto items = parse_batch_text("{\"prompt\": \"x\", \"steps\": 8, \"name\": \"clip\"}\n{\"prompt\": \"y\"}", defaults);
  REQUIRE(items.size() == 2);
  CHECK(items[0].name == "clip");
  CHECK(items[0].spec.at("steps") == 8);
  CHECK(items[0].spec.at("width") == 32);
  CHECK(items[1].name == "0002-y");
  CHECK(items[1].spec.at("steps") == 4);

  const auto forced = parse_batch_text("not json\n", {}, true);
  REQUIRE(forced.size() == 1);
  CHECK(forced[0].error.find("not valid JSON") != std::string::npos);
}

TEST_CASE("a bad line keeps its line number and does not stop the others") {
  const auto items = parse_batch_text(
      "{\"prompt\": \"a\"}\n[1, 2]\n{\"prompt\": \"b\", \"name\": \"../escape\"}\n{\"prompt\": \"c\", \"name\": \"n\"}\n"
      "{\"prompt\": \"d\", \"name\": \"n\"}\n{\"prompt\": \"\xff\"}\n");
  REQUIRE(items.size() == 6);
  CHECK(items[0].error.empty());
  CHECK(items[1].error.find("must be a JSON object") != std::string::npos);
  CHECK(items[2].error.find("name:") != std::string::npos);
  CHECK(items[3].error.empty());
  CHECK(items[4].error == "name: 'n' is already used by line 4");
  CHECK(items[5].error == "not valid UTF-8");
}

TEST_CASE("text without a job is an error naming its origin") {
  for (const char* text : {"", "\n\n", "# only a comment\n   \n"}) {
    try {
      parse_batch_text(text, {}, false, "prompt file 'p.txt'");
      FAIL("no error for '" << text << "'");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_argument);
      CHECK(std::string(e.what()) == "prompt file 'p.txt' holds no prompt");
    }
  }
}
