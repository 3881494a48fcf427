#include "stages/exec/result_latents.hpp"

#include "stages/model/model_package.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

// LibTorch defines its own CHECK (a fatal one, never counted): the tests use doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

using namespace vgen;
namespace fs = std::filesystem;

namespace {

// A folder of its own under the system temp folder, removed at the end of the case.
struct TempDir {
  fs::path path;
  TempDir() : path(fs::temp_directory_path() / ("vgen_result_latents_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

fs::path write_output(const fs::path& dir, const std::string& bytes) {
  const auto file = dir / "clip.mp4";
  std::ofstream(file, std::ios::binary) << bytes;
  return file;
}

}  // namespace

TEST_CASE("a kept result's latents come back for its output's hash and package, bit for bit") {
  TempDir dir;
  const auto output = write_output(dir.path, "not really a video, but bytes to hash");
  const auto latents = at::randn({1, 16, 3, 2, 4});
  const auto file = keep_result_latents(output, "pkg-a", latents);
  const auto sha = sha256_file(output);
  CHECK(file == result_latents_file(output, sha));
  CHECK(file.filename() == "clip.mp4." + sha + ".latents");  // removable with its output by name
  CHECK(fs::is_regular_file(file));
  const auto back = find_result_latents({dir.path / "elsewhere", dir.path}, sha, "pkg-a");  // the second folder has it
  REQUIRE(back.defined());
  CHECK(at::equal(back, latents));
}

TEST_CASE("another package, another hash, no hash or a damaged file find nothing") {
  TempDir dir;
  const auto output = write_output(dir.path, "bytes");
  keep_result_latents(output, "pkg-a", at::ones({1, 4, 2, 2, 2}));
  const auto sha = sha256_file(output);
  CHECK_FALSE(find_result_latents({dir.path}, sha, "pkg-b").defined());
  CHECK_FALSE(find_result_latents({dir.path}, std::string(64, '0'), "pkg-a").defined());
  CHECK_FALSE(find_result_latents({dir.path}, "", "pkg-a").defined());
  // A file renamed to another hash does not verify under it (its identity names the hash).
  const auto other = std::string(64, 'a');
  fs::copy_file(result_latents_file(output, sha), result_latents_file(output, other));
  CHECK_FALSE(find_result_latents({dir.path}, other, "pkg-a").defined());
  // One byte flipped: the trailing SHA-256 no longer matches.
  {
    std::fstream f(result_latents_file(output, sha), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  CHECK_FALSE(find_result_latents({dir.path}, sha, "pkg-a").defined());
}
