// BatchingOptions: the Batcher's own settings (stages/exec/batcher.hpp): how many compatible
// jobs share one model call and how long a forming group waits for company. A plain struct in a
// header without LibTorch, so that api/config.hpp holds it as it is (config keys "batching.*")
// and the Runtime hands it down to the Batcher untouched.
#pragma once

#include <chrono>
#include <cstddef>

namespace vgen {

struct BatchingOptions {
  // Up to this many compatible jobs per model call; 1: no batching. 0 is RuntimeConfig::kAuto
  // (the Runtime's tuner replaces it with a number before any Batcher sees it; a Batcher
  // given 0 runs batch 1).
  std::size_t max_batch = 1;
  // Up to this many clips per VAE decode call (config key max_decode_batch); 0: max_batch. On a
  // GPU a decode's activations grow with its batch while its speed hardly does (eight 832x480x33
  // clips in one call: the process peaked at 89 GB on an H200; one clip per call: 18.6 GB,
  // docs/PERFORMANCE.md), so
  // the Runtime sets 1 for CUDA devices when the config leaves it at 0 (api/engine.cpp).
  std::size_t max_decode_batch = 0;
  // A forming group waits at most this long after its first job for more (config key wait_ms).
  std::chrono::milliseconds wait{20};
  // Whether a job may join a denoise group that is already running (at its next step
  // boundary). false: it waits for the next group, as before joining existed (comparisons,
  // bench/cpp/bench_admission.cpp).
  bool join_running = true;
};

}  // namespace vgen
