#include "stages/schedulers/scheduler.hpp"

#include "runtime/registry.hpp"
#include "stages/schedulers/scheduler_common.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <numbers>
#include <optional>
#include <set>
#include <utility>

#include "runtime/errors.hpp"

// The scheduler registry and the Scheduler base; each scheduler is one file beside this one
// (flow_match_euler, flow_match_sigmas, ddim, euler_discrete, unipc), built by the one
// construction preamble make_from_params (scheduler_common.hpp).
//
// Parity notes. diffusers builds schedules partly in numpy float64 and partly in torch
// float32, and its step() mixes 0-dim float32 tensors with the sample. To reproduce it to
// the bit, the numpy parts are done on std::vector<double> with numpy's own formulas
// (linspace, arange with a float step, interp), and the torch parts with the same ATen ops in
// the same order and dtypes (Python `s - t` is rsub, `1 / t` is reciprocal, `t ** 0.5` is pow).

namespace vgen {
namespace {

using namespace scheduler_detail;

// ---- registry ----------------------------------------------------------------------------

Registry<SchedulerFactory>& registry() {
  static Registry<SchedulerFactory> r("scheduler", {
                                                       {"FlowMatchEulerDiscreteScheduler", &make_flow_match},
                                                       {"UniPCMultistepScheduler", &make_unipc},
                                                       {"DDIMScheduler", &make_ddim},
                                                       {"EulerDiscreteScheduler", &make_euler_discrete},
                                                   });
  return r;
}

}  // namespace

void Scheduler::restore_rows(int next_step, const std::vector<const SchedulerRowState*>& rows) {
  if (num_inference_steps_ == 0 || next_step < 0 || next_step > num_inference_steps_) {
    throw Error(ErrorKind::invalid_argument, std::string(name()) + ": cannot resume at step " + std::to_string(next_step));
  }
  for (const auto* r : rows) {
    if (r && !r->empty()) {
      throw Error(ErrorKind::invalid_argument, std::string(name()) + ": keeps no history, but a saved state has some");
    }
  }
}

void Scheduler::check_step(int step_index) const {
  if (num_inference_steps_ == 0) {
    throw Error(ErrorKind::invalid_argument, std::string(name()) + ": set_timesteps must be called first");
  }
  if (step_index < 0 || step_index >= num_inference_steps_) {
    throw Error(ErrorKind::invalid_argument, std::string(name()) + ": step index " + std::to_string(step_index) +
                                                 " outside [0, " + std::to_string(num_inference_steps_) + ")");
  }
}

void register_scheduler(std::string name, SchedulerFactory factory) { registry().add(std::move(name), std::move(factory)); }

std::unique_ptr<Scheduler> make_scheduler(std::string_view name, const SchedulerParams& params) {
  return registry().get(name)(params);  // the factory runs outside the registry's lock
}

std::vector<std::string> scheduler_names() { return registry().names(); }

}  // namespace vgen
