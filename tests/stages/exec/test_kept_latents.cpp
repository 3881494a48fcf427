#include "stages/exec/kept_latents.hpp"

#include "runtime/errors.hpp"
#include "runtime/executor.hpp"
#include "runtime/metrics.hpp"
#include "stages/exec/result_latents.hpp"
#include "stages/families/family.hpp"
#include "stages/job_spec.hpp"
#include "stages/model/model_package.hpp"
#include "tests/support/temp_dir.hpp"

#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <string>

// LibTorch defines its own CHECK (a fatal one, never counted): the tests use doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

namespace {

namespace fs = std::filesystem;
using namespace vgen;
using vgen::test::TempDir;

fs::path write_file(const fs::path& file, const std::string& bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << bytes;
  return file;
}

// An admitted extend job of `video` (its hash as admission sets it).
JobSpec extend_spec(const fs::path& video) {
  JobSpec s;
  s.prompt = "next";
  s.video = video.string();
  s.video_sha256 = sha256_file(video);
  s.extend = true;
  return s;
}

struct Fixture {
  TempDir dir;
  Executor executor{{.io_threads = 1}};
  MetricsRegistry metrics;
  Fixture() { executor.add_pool(WorkerPool::Options{.name = "codec", .threads = 1}); }
  KeptLatents kept() { return KeptLatents({.out_dir = dir.path() / "out", .metrics = &metrics}, executor); }
};

}  // namespace

// Review finding 5: the same spec with and without kept latents made slightly different bytes
// under one content key.
TEST_CASE("kept_latents: admission resolves the video's kept latents, and the content key tells the jobs apart") {
  Fixture f;
  auto kept = f.kept();
  const auto video = write_file(f.dir.path() / "out" / "clip.mp4", "a finished job's output bytes");
  auto without = extend_spec(video);
  CHECK(kept.resolve(without, "pkg").empty());  // nothing kept yet
  keep_result_latents(video, "pkg", at::randn({1, 16, 3, 2, 4}));
  auto with = extend_spec(video);
  with.video_latents_sha256 = kept.resolve(with, "pkg");
  REQUIRE(with.video_latents_sha256.size() == 64);
  CHECK(with.video_latents_sha256 == sha256_file(result_latents_file(video, sha256_file(video))));
  CHECK(job_content_key("m", with) != job_content_key("m", without));
  CHECK_FALSE(to_json(without).contains("video_latents_sha256"));  // without: the key is what it was
  CHECK(kept.resolve(with, "another package").empty());
  without.extend = false;
  CHECK(kept.resolve(without, "pkg").empty());  // only extend jobs take them
}

TEST_CASE("kept_latents: a job takes the latents it was admitted with, none without, and fails when they changed") {
  Fixture f;
  auto kept = f.kept();
  const auto video = write_file(f.dir.path() / "videos" / "clip.mp4", "bytes");
  const auto latents = at::randn({1, 4, 2, 2, 2});
  keep_result_latents(video, "pkg", latents);  // beside the video: `vgen extend` of a file
  FamilyJob w;
  w.spec = extend_spec(video);
  f.executor.run_sync(kept.load(w, "pkg"));  // admitted without: none taken, though a file is there
  CHECK_FALSE(w.video_latents.defined());
  w.spec.video_latents_sha256 = kept.resolve(w.spec, "pkg");
  f.executor.run_sync(kept.load(w, "pkg"));
  REQUIRE(w.video_latents.defined());
  CHECK(at::equal(w.video_latents, latents));
  CHECK(f.metrics.counter("vgen_extend_latents_reused_total", "").value() == 1);
  FamilyJob changed;
  changed.spec = w.spec;
  keep_result_latents(video, "pkg", at::zeros({1, 4, 2, 2, 2}));  // the same video's latents written again
  CHECK_THROWS_AS(f.executor.run_sync(kept.load(changed, "pkg")), Error);
  remove_kept_latents(video);
  CHECK_THROWS_AS(f.executor.run_sync(kept.load(changed, "pkg")), Error);
}

// Review finding 6: the latents stayed after their video was deleted.
TEST_CASE("kept_latents: keep writes them beside the output; remove_kept_latents takes them with their video only") {
  Fixture f;
  auto kept = f.kept();
  const auto out = f.dir.path() / "out";
  FamilyJob w;
  w.spec.prompt = "p";
  w.output = write_file(out / "a.mp4", "video a");
  w.state.latents = at::randn({1, 4, 2, 2, 2});
  f.executor.run_sync(kept.keep(w, "pkg", 0));  // a package that does not extend by latents
  CHECK_FALSE(fs::exists(out / ".vgen-latents"));
  f.executor.run_sync(kept.keep(w, "pkg", 5));
  const auto a = result_latents_file(w.output, sha256_file(w.output));
  CHECK(fs::is_regular_file(a));
  FamilyJob post = w;
  post.spec.upscale = 2;  // its file's frames are not the decoded ones
  post.output = write_file(out / "up.mp4", "upscaled");
  f.executor.run_sync(kept.keep(post, "pkg", 5));
  CHECK_FALSE(fs::exists(result_latents_file(post.output, sha256_file(post.output))));
  FamilyJob other = w;
  other.output = write_file(out / "b.mp4", "video b");
  f.executor.run_sync(kept.keep(other, "pkg", 5));
  const auto b = result_latents_file(other.output, sha256_file(other.output));
  // The same output name written over: one file, the new bytes'.
  write_file(w.output, "video a, rendered again");
  f.executor.run_sync(kept.keep(w, "pkg", 5));
  const auto a2 = result_latents_file(w.output, sha256_file(w.output));
  CHECK(fs::is_regular_file(a2));
  CHECK_FALSE(fs::exists(a));
  remove_kept_latents(w.output);
  CHECK_FALSE(fs::exists(a2));
  CHECK(fs::is_regular_file(b));  // another video's stay
  remove_kept_latents(other.output);
  CHECK_FALSE(fs::exists(out / ".vgen-latents"));  // the folder goes once empty
  remove_kept_latents(out / "never.mp4");  // nothing kept: nothing happens
  remove_kept_latents({});
}
