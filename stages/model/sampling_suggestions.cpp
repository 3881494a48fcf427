#include "stages/model/sampling_suggestions.hpp"

#include "runtime/errors.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace vgen {

namespace {

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// A metadata value as a finite number: the whole string, nothing after it.
std::optional<double> parse_number(const std::string& text) {
  if (text.empty() || text.size() > 64) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(x)) return std::nullopt;
  return x;
}

// Applies one field: the agreeing suggestion of every LoRA that makes one, or an error.
template <class T, class Get>
void apply_field(const char* field, T& target, const std::vector<NamedSuggestion>& loras, Get get,
                 std::map<std::string, std::string>& applied) {
  const NamedSuggestion* first = nullptr;
  for (const auto& l : loras) {
    const auto& v = get(l.suggestion);
    if (!v) continue;
    if (!first) {
      first = &l;
      continue;
    }
    if (*v != *get(first->suggestion))
      throw_error(ErrorKind::invalid_argument,
                  std::string("loras: '") + first->lora + "' suggests " + field + " " + number_text(*get(first->suggestion)) +
                      " and '" + l.lora + "' suggests " + number_text(*v) + "; give " + field + " in the job to choose");
  }
  if (!first) return;
  target = *get(first->suggestion);
  applied[field] = first->lora;
}

}  // namespace

SamplingSuggestion read_sampling_suggestion(const std::map<std::string, std::string>& metadata, const std::string& where) {
  SamplingSuggestion s;
  auto value = [&](const char* key, const char* rule, auto ok) -> std::optional<double> {
    const auto it = metadata.find(key);
    if (it == metadata.end()) return std::nullopt;
    const auto x = parse_number(it->second);
    if (!x || !ok(*x))
      throw_error(ErrorKind::invalid_argument, where + ": key '__metadata__." + key + "': must be " + rule + " (got '" +
                                                   truncate_utf8(it->second, 40) + "')");
    return x;
  };
  if (auto x = value("vgen.steps", "an integer >= 1", [](double v) { return v >= 1 && v <= 1e6 && std::floor(v) == v; }))
    s.steps = static_cast<int>(*x);
  s.guidance = value("vgen.guidance", "a number >= 0", [](double v) { return v >= 0; });
  s.shift = value("vgen.shift", "a number > 0", [](double v) { return v > 0; });
  return s;
}

std::map<std::string, std::string> apply_lora_suggestions(JobSpec& spec, const boost::json::object& job,
                                                          const std::vector<NamedSuggestion>& loras, const SpecLimits& limits) {
  std::map<std::string, std::string> applied;
  if (!job.contains("steps"))
    apply_field("steps", spec.steps, loras, [](const SamplingSuggestion& s) -> const std::optional<int>& { return s.steps; }, applied);
  if (!job.contains("guidance"))
    apply_field("guidance", spec.guidance, loras,
                [](const SamplingSuggestion& s) -> const std::optional<double>& { return s.guidance; }, applied);
  if (!job.contains("shift"))
    apply_field("shift", spec.shift, loras, [](const SamplingSuggestion& s) -> const std::optional<double>& { return s.shift; },
                applied);
  // A suggestion the model cannot take names its LoRA, not a field the job never sent.
  try {
    validate_job_spec(spec, limits);
  } catch (const Error& e) {
    if (applied.empty()) throw;
    std::string from;
    for (const auto& [field, lora] : applied) from += (from.empty() ? "" : ", ") + field + " from '" + lora + "'";
    throw_error(ErrorKind::invalid_argument, std::string(e.what()) + " (suggested by the LoRA: " + from + ")");
  }
  return applied;
}

}  // namespace vgen
