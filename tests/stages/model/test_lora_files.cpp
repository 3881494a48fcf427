// list_lora_files offers exactly the names resolve_lora_file accepts: *.safetensors directly in
// lora_dir, links inside it followed, hidden files, sub-folders and links out of it left out.
#include "stages/model/lora_files.hpp"

#include "runtime/errors.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <fstream>

namespace fs = std::filesystem;
using namespace vgen;

namespace {

void write(const fs::path& p, std::size_t bytes) { std::ofstream(p, std::ios::binary) << std::string(bytes, 'x'); }

std::vector<std::string> names(const std::vector<LoraFileEntry>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.name);
  return out;
}

}  // namespace

TEST_CASE("the listed LoRAs are the names a job may use, sorted, with their sizes") {
  test::TempDir tmp;
  const auto dir = tmp / "loras";
  fs::create_directories(dir / "sub.safetensors");  // a folder with the suffix
  write(dir / "style.safetensors", 10);
  write(dir / "anime.safetensors", 3);
  write(dir / ".hidden.safetensors", 1);
  write(dir / "notes.txt", 1);
  write(dir / ".safetensors", 1);  // no name
  write(dir / "sub.safetensors" / "nested.safetensors", 1);
  write(tmp / "outside.safetensors", 7);
  fs::create_symlink(tmp / "outside.safetensors", dir / "escape.safetensors");
  fs::create_symlink(dir / "style.safetensors", dir / "alias.safetensors");
  fs::create_symlink(dir / "missing.safetensors", dir / "dangling.safetensors");

  const auto listed = list_lora_files(dir);
  CHECK(names(listed) == std::vector<std::string>{"alias", "anime", "style"});
  CHECK(listed[0].bytes == 10);  // the link's target
  CHECK(listed[1].bytes == 3);
  for (const auto& e : listed) CHECK(resolve_lora_file(dir, e.name).filename().string().ends_with(".safetensors"));
  for (const char* refused : {"escape", "dangling", "sub", ".hidden"}) CHECK_THROWS_AS(resolve_lora_file(dir, refused), Error);
}

TEST_CASE("no lora_dir, or one that does not exist, offers nothing") {
  CHECK(list_lora_files({}).empty());
  test::TempDir tmp;
  CHECK(list_lora_files(tmp / "absent").empty());
  write(tmp / "file", 1);
  CHECK(list_lora_files(tmp / "file").empty());
}
