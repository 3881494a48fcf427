// JobSpec's output shape (set_output_shape), a file of its own: test_job_spec.cpp passed 600 lines.
#include "stages/job_spec.hpp"

#include <doctest/doctest.h>

using namespace vgen;

TEST_CASE("the output's shape: an extension's joined clip, interpolated frames and fps, upscaled sides") {
  JobSpec s;
  s.frames = 9, s.width = 48, s.height = 32, s.fps = 16;
  set_output_shape(s, 0, 1);
  CHECK(s.output_frames == 9);
  CHECK(s.output_width == 48);
  CHECK(s.output_height == 32);
  CHECK(s.output_fps == 16);
  s.interpolate = 2, s.upscale = 4;
  set_output_shape(s, 0, 1);
  CHECK(s.output_frames == 17);  // (9 - 1) x 2 + 1
  CHECK(s.output_width == 192);
  CHECK(s.output_height == 128);
  CHECK(s.output_fps == 32);
  s.interpolate = 1, s.upscale = 1, s.extend = true;
  set_output_shape(s, 9, 5);  // latents: the segment's first 5 frames are the clip's last 5
  CHECK(s.output_frames == 13);
  set_output_shape(s, 9, 1);  // by the last frame: the segment less its first
  CHECK(s.output_frames == 17);
  s.interpolate = 2;
  set_output_shape(s, 9, 1);
  CHECK(s.output_frames == 33);  // the joined 17, interpolated
  set_output_shape(s, 0, 5);  // the video's frame count unknown: so is the output's
  CHECK(s.output_frames == 0);
}
