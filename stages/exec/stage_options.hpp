// StageOptions: the concurrency of one render stage (workers and input queue capacity, as a
// Pipeline StageSpec takes them), keyed by the stage names a ModelSet declares
// (stages/exec/model_set.hpp ModelSet::stages()). No LibTorch here: api/config.hpp holds the
// map as it is (config keys "stages.<name>.workers|queue") and the Runtime hands it down.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace vgen {

struct StageOptions {
  std::size_t workers = 1;
  std::size_t queue = 4;  // capacity of the stage's input queue
};

using StageOptionsMap = std::map<std::string, StageOptions, std::less<>>;

// The stages a ModelSet declares, in pipeline order. interpolate and upscale (stages/post/) run
// only for jobs that ask for them; the others skip them (StageSpec::applies).
inline std::vector<std::string> stage_names() { return {"preprocess", "denoise", "decode", "interpolate", "upscale", "encode"}; }

// Those stages with their defaults. Its keys are the names a config may give under "stages"
// (any other is an unknown key).
inline StageOptionsMap default_stage_options() {
  return {{"preprocess", {1, 64}}, {"denoise", {1, 4}}, {"decode", {1, 4}},
          {"interpolate", {1, 4}}, {"upscale", {1, 4}}, {"encode", {1, 4}}};
}

}  // namespace vgen
