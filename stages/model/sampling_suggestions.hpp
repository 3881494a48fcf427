// Suggested sampling settings (issue 22, few-step distillation LoRAs): a LoRA file or a model
// package may suggest the steps, classifier-free guidance and flow shift its jobs should use.
//
// Precedence, field by field:
//   the job's own field  >  the LoRAs' suggestion  >  the package's suggestion (manifest
//   "defaults": steps, guidance_scale, optional shift)  >  vgen's built-in default (JobSpec)
// The package level is already in a parsed spec (parse_job_spec starts from the package's
// defaults); apply_lora_suggestions puts the LoRA level on top, for the fields the job's JSON
// does not name.
//
// A LoRA file suggests through safetensors "__metadata__" strings (docs/LORA.md):
//   "vgen.steps"     an integer >= 1
//   "vgen.guidance"  a number >= 0 (1 or less: no classifier-free guidance, no unconditional rows)
//   "vgen.shift"     a number > 0: the scheduler's flow shift
// No other metadata key is read: the few-step LoRAs people use (LightX2V's, as Kijai/ComfyUI
// ship them) carry none, and kohya's "ss_steps" counts training steps, not sampling steps.
//
// Two LoRAs of one job that suggest different values for a field the job does not set are an
// Error(invalid_argument) naming the field and both LoRAs: vgen does not guess which one wins;
// the job settles it by giving the field. Equal suggestions agree.
// Thread-safety: plain values and pure functions. No LibTorch.
#pragma once

#include "stages/job_spec.hpp"

#include <boost/json/object.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vgen {

struct SamplingSuggestion {
  std::optional<int> steps;
  std::optional<double> guidance;
  std::optional<double> shift;
  bool empty() const { return !steps && !guidance && !shift; }
  bool operator==(const SamplingSuggestion&) const = default;
};

// The "vgen.*" keys of a safetensors header's metadata. A value that is not a number in range
// is Error(invalid_argument) "<where>: key '__metadata__.vgen.steps': must be ... (got 'x')".
SamplingSuggestion read_sampling_suggestion(const std::map<std::string, std::string>& metadata, const std::string& where);

// One suggesting LoRA: its name in the job (messages, the record) and what it suggests.
struct NamedSuggestion {
  std::string lora;
  SamplingSuggestion suggestion;
};

// Sets spec.steps / guidance / shift from the LoRAs' suggestions for each of "steps",
// "guidance", "shift" that `job` (the job's JSON object) does not contain. Returns the fields it
// set, each with the LoRA it came from ({"steps": "fast4"}). Errors (invalid_argument):
// conflicting suggestions (above), a suggested value outside `limits` (naming the LoRA).
std::map<std::string, std::string> apply_lora_suggestions(JobSpec& spec, const boost::json::object& job,
                                                          const std::vector<NamedSuggestion>& loras, const SpecLimits& limits);

}  // namespace vgen
