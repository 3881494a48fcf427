#include "stages/model/aoti_library_cache.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "tests/support/temp_dir.hpp"

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

// LibTorch's c10/util/Logging.h defines a glog-style CHECK that aborts; this file's CHECKs
// are doctest's (counted and reported).
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

// A .pt2-shaped archive (torch's own zip writer, as torch.export's packages are written) with
// the given records; a model's records live under data/aotinductor/<model>/.
void write_archive(const fs::path& file, const std::map<std::string, std::string>& records) {
  caffe2::serialize::PyTorchStreamWriter writer(file.string());
  for (const auto& [name, data] : records) writer.writeRecord(name, data.data(), data.size());
  writer.writeEndOfFile();
}

std::map<std::string, std::string> two_models(const std::string& library = std::string(100000, 'L')) {
  return {{"data/aotinductor/forward-model/abc.so", library},
          {"data/aotinductor/forward-model/abc.wrapper_metadata.json", "{\"AOTI_DEVICE_KEY\": \"cpu\"}"},
          {"data/aotinductor/forward_compact-model/def.so", std::string(5000, 'C')},
          {"data/aotinductor/forward_compact-model/def.wrapper_metadata.json", "{}"},
          {"archive_format", "pt2"}};
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every entry folder under the cache root (one per .pt2 path, holding one per model version).
std::vector<std::string> entries(const fs::path& root) {
  std::vector<std::string> out;
  if (!fs::exists(root)) return out;
  for (const auto& folder : fs::directory_iterator(root))
    for (const auto& e : fs::directory_iterator(folder.path()))
      if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("a model is unpacked once, then found; its files are the archive's, in a private folder") {
  test::TempDir dir("vgen-aoti-cache-");
  write_archive(dir / "m.pt2", two_models());
  const AotiLibraryCache cache(dir / "cache");
  const auto first = cache.unpack(dir / "m.pt2", "forward-model");
  REQUIRE(first);
  CHECK_FALSE(first->reused);
  CHECK(first->library.filename() == "abc.so");
  CHECK(read(first->library) == std::string(100000, 'L'));
  CHECK(fs::exists(first->model_dir / "abc.wrapper_metadata.json"));
  CHECK_FALSE(fs::exists(first->model_dir / "def.so"));  // only the model asked for
  CHECK(first->weights.empty());
  CHECK((fs::status(first->model_dir.parent_path().parent_path()).permissions() & fs::perms::others_all) == fs::perms::none);
  const auto again = cache.unpack(dir / "m.pt2", "forward-model");
  REQUIRE(again);
  CHECK(again->reused);
  CHECK(again->library == first->library);
  const auto other = cache.unpack(dir / "m.pt2", "forward_compact-model");
  REQUIRE(other);
  CHECK(other->library.filename() == "def.so");
  CHECK(entries(dir / "cache").size() == 2);  // both models of the one file, neither pruning the other
}

TEST_CASE("an altered entry is unpacked again; a changed .pt2 replaces its old entry; a removed one's folder goes") {
  test::TempDir dir("vgen-aoti-cache-");
  write_archive(dir / "m.pt2", two_models());
  const AotiLibraryCache cache(dir / "cache");
  const auto first = cache.unpack(dir / "m.pt2", "forward-model");
  REQUIRE(first);
  fs::resize_file(first->library, 10);  // truncated behind our back
  const auto mended = cache.unpack(dir / "m.pt2", "forward-model");
  REQUIRE(mended);
  CHECK_FALSE(mended->reused);
  CHECK(fs::file_size(mended->library) == 100000);
  std::ofstream(mended->model_dir.parent_path() / "files.list") << "garbage\tabc.so\n";  // a damaged list: unpacked again, not an error
  const auto relisted = cache.unpack(dir / "m.pt2", "forward-model");
  REQUIRE(relisted);
  CHECK_FALSE(relisted->reused);

  const auto before = entries(dir / "cache");
  write_archive(dir / "m.pt2", two_models(std::string(100001, 'N')));  // a new export at the same path
  fs::last_write_time(dir / "m.pt2", fs::last_write_time(dir / "m.pt2") + std::chrono::seconds(5));
  const auto changed = cache.unpack(dir / "m.pt2", "forward-model");
  REQUIRE(changed);
  CHECK_FALSE(changed->reused);
  CHECK(read(changed->library) == std::string(100001, 'N'));
  const auto after = entries(dir / "cache");
  REQUIRE(after.size() == 1);  // the old version's entry went
  CHECK(after != before);

  write_archive(dir / "gone.pt2", two_models());
  REQUIRE(cache.unpack(dir / "gone.pt2", "forward-model"));
  CHECK(entries(dir / "cache").size() == 2);
  fs::remove(dir / "gone.pt2");
  fs::last_write_time(dir / "m.pt2", fs::last_write_time(dir / "m.pt2") + std::chrono::seconds(5));
  REQUIRE(cache.unpack(dir / "m.pt2", "forward-model"));  // a new entry prunes the removed file's folder
  CHECK(entries(dir / "cache").size() == 1);
}

TEST_CASE("what the cache cannot serve goes to torch's loader with the reason; a file that is no archive is refused by name") {
  test::TempDir dir("vgen-aoti-cache-");
  write_archive(dir / "m.pt2", two_models());
  std::string why;
  CHECK_FALSE(AotiLibraryCache({}).unpack(dir / "m.pt2", "forward-model", &why));
  CHECK(why.find("off") != std::string::npos);
  const AotiLibraryCache cache(dir / "cache");
  CHECK_FALSE(cache.unpack(dir / "m.pt2", "other-model", &why));
  CHECK(why.find("no compiled library for 'other-model'") != std::string::npos);
  write_archive(dir / "source_only.pt2", {{"data/aotinductor/forward-model/abc.cpp", "int main;"}});
  CHECK_FALSE(cache.unpack(dir / "source_only.pt2", "forward-model", &why));  // torch compiles it from source
  std::ofstream(dir / "bad.pt2") << "not a zip archive at all";
  try {
    cache.unpack(dir / "bad.pt2", "forward-model");
    FAIL("a file that is no archive was unpacked");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).find("bad.pt2") != std::string::npos);
  }
  for (const auto& e : fs::recursive_directory_iterator(dir / "cache"))  // no half-made entry left behind
    CHECK(e.path().filename().string().rfind(".tmp-", 0) != 0);
}

TEST_CASE("threads unpacking the same model at once end with one complete entry" * doctest::timeout(120)) {
  test::TempDir dir("vgen-aoti-cache-");
  write_archive(dir / "m.pt2", two_models(std::string(4u << 20, 'T')));
  const AotiLibraryCache cache(dir / "cache");
  std::vector<std::optional<AotiUnpacked>> got(6);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < got.size(); ++i) threads.emplace_back([&, i] { got[i] = cache.unpack(dir / "m.pt2", "forward-model"); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) {
    REQUIRE(g);
    CHECK(g->library == got[0]->library);
  }
  CHECK(fs::file_size(got[0]->library) == (4u << 20));
  CHECK(entries(dir / "cache").size() == 1);
  for (const auto& e : fs::recursive_directory_iterator(dir / "cache"))
    CHECK(e.path().filename().string().rfind(".tmp-", 0) != 0);
}

TEST_CASE("a .pt2 replaced by a file of the same size and time is a new version; pruning spares a model whose name ends like another's") {
  test::TempDir dir("vgen-aoti-cache-");
  auto models = two_models();
  models["data/aotinductor/a-forward-model/x.so"] = std::string(300, 'A');
  write_archive(dir / "m.pt2", models);
  const AotiLibraryCache cache(dir / "cache");
  REQUIRE(cache.unpack(dir / "m.pt2", "forward-model"));
  REQUIRE(cache.unpack(dir / "m.pt2", "a-forward-model"));
  CHECK(entries(dir / "cache").size() == 2);
  // The same bytes count and modification time, another file (a re-export renamed into place).
  const auto when = fs::last_write_time(dir / "m.pt2");
  auto again = two_models(std::string(100000, 'R'));
  again["data/aotinductor/a-forward-model/x.so"] = std::string(300, 'B');
  // (Written under the same file name elsewhere: the writer names the archive's folder after it.)
  fs::create_directories(dir / "staging");
  write_archive(dir / "staging" / "m.pt2", again);
  fs::last_write_time(dir / "staging" / "m.pt2", when);
  REQUIRE(fs::file_size(dir / "staging" / "m.pt2") == fs::file_size(dir / "m.pt2"));
  fs::rename(dir / "staging" / "m.pt2", dir / "m.pt2");
  const auto replaced = cache.unpack(dir / "m.pt2", "forward-model");
  REQUIRE(replaced);
  CHECK_FALSE(replaced->reused);
  CHECK(read(replaced->library) == std::string(100000, 'R'));
  const auto left = entries(dir / "cache");
  CHECK(left.size() == 2);  // forward-model's old entry went; a-forward-model's stays until it is unpacked again
  CHECK(std::count_if(left.begin(), left.end(), [](const std::string& e) { return e.size() > 15 && e.substr(e.size() - 15) == "a-forward-model"; }) == 1);
}

TEST_CASE("a .pt2's folder open to other users is refused: what is loaded from it is code") {
  test::TempDir dir("vgen-aoti-cache-");
  write_archive(dir / "m.pt2", two_models());
  const AotiLibraryCache cache(dir / "cache");
  const auto first = cache.unpack(dir / "m.pt2", "forward-model");
  REQUIRE(first);
  const auto folder = first->model_dir.parent_path().parent_path();
  fs::permissions(folder, fs::perms::group_write | fs::perms::others_read | fs::perms::others_exec, fs::perm_options::add);
  std::string why;
  CHECK_FALSE(cache.unpack(dir / "m.pt2", "forward-model", &why));
  CHECK(why.find("not this user's alone") != std::string::npos);
}
