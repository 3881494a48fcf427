// Batch input: prompt text and JSONL become items with line numbers, names and per-line errors.
#include "api/batch/batch_input.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <fstream>
#include <memory>
#include <sstream>
#include <streambuf>
#include <string>

#include <unistd.h>

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

TEST_CASE("a UTF-8 byte order mark is dropped before the JSONL detection") {
  const auto items = parse_batch_text("\xEF\xBB\xBF{\"prompt\": \"x\", \"name\": \"clip\"}\r\n{\"prompt\": \"y\"}\n");
  REQUIRE(items.size() == 2);
  CHECK(items[0].error.empty());
  CHECK(items[0].name == "clip");
  CHECK(items[0].spec.at("prompt") == "x");
  CHECK(items[1].spec.at("prompt") == "y");
  const auto text = parse_batch_text("\xEF\xBB\xBF" "a red circle\n");
  REQUIRE(text.size() == 1);
  CHECK(text[0].spec.at("prompt") == "a red circle");
  // Only at the very start: elsewhere it is part of the prompt.
  const auto later = parse_batch_text("a\n\xEF\xBB\xBF" "b\n");
  CHECK(later[1].spec.at("prompt") == "\xEF\xBB\xBF" "b");
}

TEST_CASE("a line over the limit is invalid on its own; the lines after it still run") {
  const std::string text = "first prompt\n" + std::string(100, 'x') + "\nthird prompt\n";
  BatchReader reader(std::make_unique<std::istringstream>(text), {}, false, "prompt text", 64);
  const auto a = reader.next();
  const auto b = reader.next();
  const auto c = reader.next();
  REQUIRE((a && b && c));
  CHECK(a->error.empty());
  CHECK(b->line == 2);
  CHECK(b->error == "longer than 64 bytes (the limit for one line)");
  CHECK(b->spec.empty());
  CHECK(c->line == 3);
  CHECK(c->error.empty());
  CHECK(c->name == "0003-third-prompt");
  CHECK_FALSE(reader.next());
}

TEST_CASE("a NUL byte refuses the whole input as not text, without reading on" * doctest::timeout(30)) {
  try {
    parse_batch_text(std::string_view("a prompt\nnul \0 here\n", 21), {}, false, "prompt file 'x'");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()) == "prompt file 'x' is not a text file (a NUL byte on line 2)");
  }
  // An endless device ends at its first byte.
  auto reader = BatchReader::open_file("/dev/zero");
  CHECK_THROWS_WITH_AS(reader.next(), "prompt file '/dev/zero' is not a text file (a NUL byte on line 1)", Error);
}

TEST_CASE("items stream: the reader holds one line, not the file") {
  // A stream that is never at its end: the reader must hand out items as it reads.
  struct EndlessPrompts : std::streambuf {
    std::string line = "a red circle moving left\n";
    int_type underflow() override {
      setg(line.data(), line.data(), line.data() + line.size());
      return traits_type::to_int_type(line[0]);
    }
  };
  struct EndlessStream : std::istream {
    EndlessPrompts buf;
    EndlessStream() : std::istream(nullptr) { rdbuf(&buf); }
  };
  BatchReader reader(std::make_unique<EndlessStream>());
  for (int i = 1; i <= 1000; ++i) {
    const auto item = reader.next();
    REQUIRE(item);
    CHECK(item->line == i);
  }
}

TEST_CASE("output names: reserved names and outputs that collide across formats are invalid lines") {
  const auto items = parse_batch_text(
      "{\"prompt\": \"a\", \"name\": \"batch-summary.json\", \"format\": \"png\"}\n"
      "{\"prompt\": \"b\", \"name\": \"batch-summary.json\"}\n"
      "{\"prompt\": \"c\", \"name\": \"clip\"}\n"
      "{\"prompt\": \"d\", \"name\": \"clip.mp4\", \"format\": \"png\"}\n"
      "{\"prompt\": \"e\", \"name\": \"clip\", \"format\": \"gif\"}\n"
      "{\"prompt\": \"f\", \"name\": \"clip\", \"format\": \"gif\"}\n"
      "{\"prompt\": \"g\", \"name\": \"odd\", \"format\": \"avi\"}\n");
  REQUIRE(items.size() == 7);
  CHECK(items[0].error == "name: 'batch-summary.json' is reserved: its output 'batch-summary.json' is the batch's own file");
  CHECK(items[1].error.empty());  // writes batch-summary.json.mp4
  CHECK(items[2].error.empty());
  CHECK(items[3].error == "name: 'clip.mp4' (png) would write 'clip.mp4', the output of line 3");
  CHECK(items[4].error.empty());  // clip.gif: another file
  CHECK(items[5].error == "name: 'clip' is already used by line 5");
  CHECK(items[6].error.empty());  // an unknown format is the runtime's to refuse
  const auto by_default = parse_batch_text("{\"prompt\": \"a\", \"name\": \"batch-summary.json\"}\n", {{"format", "png"}});
  CHECK(by_default[0].error.find("is reserved") != std::string::npos);
}

TEST_CASE("peek reads ahead without consuming; an empty input fails at the peek") {
  BatchReader reader(std::make_unique<std::istringstream>("# c\nfirst\nsecond\n"));
  const auto* p = reader.peek();
  REQUIRE(p);
  CHECK(p->line == 2);
  CHECK(reader.peek() == p);
  CHECK(reader.next()->line == 2);
  CHECK(reader.next()->line == 3);
  CHECK(reader.peek() == nullptr);
  CHECK_FALSE(reader.next());
  BatchReader empty(std::make_unique<std::istringstream>("\n# nothing\n"), {}, false, "prompt file 'e'");
  CHECK_THROWS_WITH_AS(empty.peek(), "prompt file 'e' holds no prompt", Error);
}

TEST_CASE("JSONL image paths: relative ones name files beside the prompt file; absolute ones stay") {
  const auto dir = std::filesystem::temp_directory_path() / ("vgen-batch-img-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "jobs");
  const auto file = dir / "jobs" / "b.jsonl";
  {
    std::ofstream out(file);
    out << R"({"prompt":"a","image":"in/first.png","last_image":"../last.webp"})" << "\n"
        << R"({"prompt":"b","image":"/abs/x.jpg"})" << "\n"
        << R"({"prompt":"c","image":7})" << "\n";
  }
  auto reader = BatchReader::open_file(file);
  const auto a = reader.next();
  const auto b = reader.next();
  const auto c = reader.next();
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  const auto base = std::filesystem::absolute(dir);
  CHECK(a->spec.at("image").as_string() == (base / "jobs" / "in" / "first.png").string());
  CHECK(a->spec.at("last_image").as_string() == (base / "last.webp").string());
  CHECK(b->spec.at("image").as_string() == "/abs/x.jpg");
  CHECK(c->spec.at("image").is_int64());  // left for validation to name
  // Text from a stream (no file): relative to the working directory.
  const auto items = parse_batch_text(R"({"prompt":"a","image":"x.png"})", {}, true);
  REQUIRE(items.size() == 1);
  CHECK(items[0].spec.at("image").as_string() == (std::filesystem::current_path() / "x.png").string());
  std::filesystem::remove_all(dir);
}
