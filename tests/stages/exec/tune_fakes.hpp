// Fakes for the auto-tuner's tests (test_auto_tune.cpp, test_tune_search_thread.cpp): a device
// whose step and decode times follow a formula, and a two-core tuning space.
#pragma once

#include "stages/exec/auto_tune.hpp"

#include <vector>

namespace vgen::test {

// A fake device: a call of `batch` rows costs a fixed overhead plus per-row work, the work
// shared by the lease's threads; leases run side by side, slowed by `contention` each.
struct FakeDevice {
  double overhead = 1.0, per_row = 1.0, quadratic = 0.0, contention = 0.0, decode = 0.5, spent = 1.0;
  std::size_t oom_above = 1000;  // batches larger than this run out of memory
  std::vector<TuneSetting> calls;

  TuneSample operator()(const TuneSetting& s) {
    calls.push_back(s);
    TuneSample out;
    if (s.batch > oom_above) {
      out.out_of_memory = true;
      return out;
    }
    const double slow = 1.0 + contention * static_cast<double>(s.leases - 1);
    const auto b = static_cast<double>(s.batch);
    out.step_s = (overhead + per_row * b / static_cast<double>(s.intra_op) + quadratic * b * b) * slow;
    out.decode_s = decode * static_cast<double>(s.batch) * slow;
    out.spent_s = spent;
    return out;
  }
  TuneMeasure measure() {
    return [this](const TuneSetting& s) { return (*this)(s); };
  }
};

TuneSpace two_cores() {
  TuneSpace s;
  s.cores = 2;
  s.max_batch = 8;
  s.steps = 10;
  return s;
}

}  // namespace vgen::test
