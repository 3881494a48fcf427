// The videos routes: which paths OpenAiVideos serves (HttpApi hands it those). Its behaviour
// end to end, through the official `openai` SDK against `vgen serve`:
// tests/python/test_openai_videos.py; the field mapping: test_openai_video_fields.cpp.
#include "api/http/openai_videos.hpp"

#include <doctest/doctest.h>

using namespace vgen;

TEST_CASE("the routes: under /v1/videos and /v1/models only") {
  CHECK(OpenAiVideos::serves("/v1/videos"));
  CHECK(OpenAiVideos::serves("/v1/videos/abc/content"));
  CHECK(OpenAiVideos::serves("/v1/models"));
  CHECK_FALSE(OpenAiVideos::serves("/v1/videosx"));
  CHECK_FALSE(OpenAiVideos::serves("/v1/jobs"));
  const auto routes = OpenAiVideos::routes();
  CHECK(routes.size() == 9);
  for (const auto& [method, path] : routes) CHECK(OpenAiVideos::serves(path));
}
