#include "stages/post/post_process.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include <atomic>

using namespace vgen;

namespace {

// A variant that repeats frames (interpolate) or pixels (upscale): enough to test the registry
// and the contract check without FFmpeg.
class Repeat final : public PostProcessor {
 public:
  explicit Repeat(PostKind kind, bool keep_contract = true) : kind_(kind), keep_(keep_contract) {}
  PostKind kind() const override { return kind_; }
  std::string name() const override { return "repeat"; }
  VideoFrames run(const VideoFrames& in, int factor, const std::string&) const override {
    if (kind_ == PostKind::upscale) return VideoFrames::allocate(in.width * factor, in.height * factor, in.count, in.fps);
    return VideoFrames::allocate(in.width, in.height, keep_ ? (in.count - 1) * factor + 1 : in.count * factor, in.fps * factor);
  }

 private:
  PostKind kind_;
  bool keep_;
};

JobSpec job(int width, int height, int upscale) {
  JobSpec s;
  s.prompt = "x";
  s.width = width;
  s.height = height;
  s.upscale = upscale;
  return s;
}

}  // namespace

TEST_CASE("variants are chosen by name; the wrong kind and unknown names are refused naming the setting") {
  static std::atomic<int> made{0};
  if (!post_processors().contains("test-repeat-up")) {
    post_processors().add("test-repeat-up", [](const PostOptions&) { ++made; return std::make_shared<const Repeat>(PostKind::upscale); });
    post_processors().add("test-repeat-in", [](const PostOptions&) { return std::make_shared<const Repeat>(PostKind::interpolate); });
  }
  PostOptions o;
  o.upscaler = "test-repeat-up";
  o.interpolator = "test-repeat-in";
  CHECK(make_post_processor(PostKind::upscale, o)->kind() == PostKind::upscale);
  CHECK(make_post_processor(PostKind::interpolate, o)->kind() == PostKind::interpolate);
  CHECK(made == 1);
  o.upscaler = "test-repeat-in";
  CHECK_THROWS_WITH_AS(make_post_processor(PostKind::upscale, o), doctest::Contains("post.upscaler: 'test-repeat-in' is a interpolate variant"), Error);
  o.upscaler = "no-such";
  CHECK_THROWS_WITH_AS(make_post_processor(PostKind::upscale, o), doctest::Contains("unknown post-stage variant 'no-such'"), Error);
  CHECK_THROWS_AS(post_processors().add("test-repeat-up", {}), Error);
}

TEST_CASE("without a name the upscaler is lanczos, or realesrgan when a model is configured") {
  // Neither is registered in this test (their libraries are not linked): the error names the
  // variant that was chosen.
  PostOptions o;
  CHECK_THROWS_WITH_AS(make_post_processor(PostKind::upscale, o), doctest::Contains("'lanczos'"), Error);
  o.upscale_model = "/nowhere";
  CHECK_THROWS_WITH_AS(make_post_processor(PostKind::upscale, o), doctest::Contains("'realesrgan'"), Error);
}

TEST_CASE("without a name the interpolator is minterpolate, or rife when a model is configured") {
  PostOptions o;
  CHECK_THROWS_WITH_AS(make_post_processor(PostKind::interpolate, o), doctest::Contains("'minterpolate'"), Error);
  o.interpolate_model = "/nowhere";
  CHECK_THROWS_WITH_AS(make_post_processor(PostKind::interpolate, o), doctest::Contains("'rife'"), Error);
  o.interpolator = "minterpolate";  // a name given wins over the model
  CHECK_THROWS_WITH_AS(make_post_processor(PostKind::interpolate, o), doctest::Contains("'minterpolate'"), Error);
}

TEST_CASE("a job whose upscaled frame passes post.max_side is refused naming upscale") {
  PostOptions o;
  o.max_side = 1024;
  CHECK_NOTHROW(check_post_job(job(512, 256, 2), o));
  CHECK_NOTHROW(check_post_job(job(2048, 2048, 1), o));  // no upscale: not a post question
  try {
    check_post_job(job(512, 256, 4), o);
    FAIL("not refused");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    CHECK(std::string(e.what()).rfind("upscale: ", 0) == 0);
    CHECK(std::string(e.what()).find("2048") != std::string::npos);
  }
}

TEST_CASE("the output contract: frames, size and fps a factor makes") {
  const auto in = VideoFrames::allocate(16, 8, 5, 12.0);
  Repeat up(PostKind::upscale), in2(PostKind::interpolate), wrong(PostKind::interpolate, false);
  CHECK_NOTHROW(check_post_output(up, in, 2, up.run(in, 2, "")));
  CHECK_NOTHROW(check_post_output(in2, in, 4, in2.run(in, 4, "")));
  CHECK(in2.run(in, 4, "").count == 17);
  CHECK_THROWS_WITH_AS(check_post_output(wrong, in, 2, wrong.run(in, 2, "")), doctest::Contains("10 frames; expected 16x8, 9 frames"), Error);
}
