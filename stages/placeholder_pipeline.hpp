// PLACEHOLDER pipeline for the demo until a real model package lands (inference issue).
//
// It runs the real runtime (pipeline, queues, worker pools, retry, metrics) and the real
// FFmpeg encoder, but no diffusion model: the "synthesize" stage draws a deterministic
// moving test pattern seeded from the job's content instead of denoising latents. Every
// output says so in its name ("placeholder-..."). Nothing here claims to follow the prompt.
//
// Job spec (JSON object): {"prompt": non-empty string, "name": optional file stem}.
// Ownership: the stages borrow the WorkerPools; they must outlive the pipeline.
#pragma once

#include "runtime/pipeline.hpp"
#include "runtime/worker_pool.hpp"
#include "stages/encode.hpp"

#include <filesystem>
#include <vector>

namespace vgen {

struct PlaceholderOptions {
  std::filesystem::path out_dir;
  int width = 256, height = 256, frames = 17, steps = 8;
  double fps = 16.0;
  EncodeOptions encode;
  WorkerPool* compute = nullptr;  // runs the synthetic "denoising" steps
  WorkerPool* codec = nullptr;    // runs the encoder
};

// What the stages leave in Job::payload.
struct PlaceholderResult {
  std::uint32_t seed = 0;
  std::string stem;
  VideoFrames frames;
  std::filesystem::path output;
};

std::vector<StageSpec> make_placeholder_stages(const PlaceholderOptions& options);

}  // namespace vgen
