#include "stages/model/sampling_suggestions.hpp"

#include <doctest/doctest.h>

#include "runtime/errors.hpp"

#include <boost/json.hpp>

#include <functional>

using namespace vgen;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::invalid_argument);
    return e.what();
  }
  return "no error";
}

// A package whose defaults are steps 30, guidance 5, shift 3 (the package's suggestion).
struct Package {
  SpecLimits limits;
  JobSpec defaults;
  Package() {
    defaults.steps = 30;
    defaults.guidance = 5.0;
    defaults.shift = 3.0;
  }
  // parse_job_spec + the LoRAs' suggestions, as a family's validate does.
  JobSpec run(boost::json::object job, const std::vector<NamedSuggestion>& loras,
              std::map<std::string, std::string>* applied = nullptr) const {
    job["prompt"] = "p";
    auto s = parse_job_spec(job, defaults, limits);
    auto a = apply_lora_suggestions(s, job, loras, limits);
    if (applied) *applied = a;
    return s;
  }
};

SamplingSuggestion few_step(int steps, double guidance, std::optional<double> shift = std::nullopt) {
  return SamplingSuggestion{steps, guidance, shift};
}

}  // namespace

TEST_CASE("the vgen.* metadata keys are read; other keys are ignored; bad values name the key") {
  const auto s = read_sampling_suggestion({{"vgen.steps", "4"}, {"vgen.guidance", "1.0"}, {"vgen.shift", "5"},
                                           {"ss_steps", "12000"}, {"format", "pt"}},
                                          "lora file 'x'");
  CHECK(s.steps == 4);
  CHECK(s.guidance == 1.0);
  CHECK(s.shift == 5.0);
  CHECK(read_sampling_suggestion({{"ss_steps", "12000"}, {"modelspec.title", "t"}}, "f").empty());
  CHECK(read_sampling_suggestion({{"vgen.guidance", "0"}}, "f").guidance == 0.0);

  for (auto [key, value] : std::vector<std::pair<std::string, std::string>>{{"vgen.steps", "4.5"},
                                                                             {"vgen.steps", "0"},
                                                                             {"vgen.steps", "four"},
                                                                             {"vgen.steps", "4 "},
                                                                             {"vgen.guidance", "-1"},
                                                                             {"vgen.guidance", "nan"},
                                                                             {"vgen.shift", "0"},
                                                                             {"vgen.shift", ""}}) {
    CAPTURE(key);
    CAPTURE(value);
    const auto e = error_of([&] { read_sampling_suggestion({{key, value}}, "lora file 'a.safetensors'"); });
    CHECK(e.find("lora file 'a.safetensors': key '__metadata__." + key + "'") != std::string::npos);
  }
}

TEST_CASE("precedence: the job's field > the LoRA's suggestion > the package's > the built-in default") {
  Package pkg;
  std::map<std::string, std::string> applied;
  // No LoRA: the package's suggestions (its defaults).
  auto s = pkg.run({}, {}, &applied);
  CHECK(s.steps == 30);
  CHECK(s.guidance == 5.0);
  CHECK(s.shift == 3.0);
  CHECK(applied.empty());
  // A few-step LoRA: its suggestions over the package's, for each field it names.
  s = pkg.run({}, {{"fast", few_step(4, 1.0)}}, &applied);
  CHECK(s.steps == 4);
  CHECK(s.guidance == 1.0);
  CHECK(s.shift == 3.0);  // not suggested by the LoRA: the package's
  CHECK(applied == std::map<std::string, std::string>{{"steps", "fast"}, {"guidance", "fast"}});
  // The job's own fields win over the LoRA, field by field.
  s = pkg.run({{"steps", 8}, {"shift", 7.5}}, {{"fast", few_step(4, 1.0, 5.0)}}, &applied);
  CHECK(s.steps == 8);
  CHECK(s.guidance == 1.0);
  CHECK(s.shift == 7.5);
  CHECK(applied == std::map<std::string, std::string>{{"guidance", "fast"}});
  // Even a job field equal to the built-in default is the job's choice.
  s = pkg.run({{"guidance", 5.0}}, {{"fast", few_step(4, 1.0)}});
  CHECK(s.guidance == 5.0);
  // A package without suggestions: the built-in defaults (shift 0: the scheduler config's).
  Package bare;
  bare.defaults = JobSpec{};
  s = bare.run({}, {});
  CHECK(s.steps == JobSpec{}.steps);
  CHECK(s.shift == 0.0);
}

TEST_CASE("two LoRAs: agreeing suggestions apply, conflicting ones are an error unless the job sets the field") {
  Package pkg;
  std::map<std::string, std::string> applied;
  // A style LoRA suggests nothing: the few-step one's suggestions stand.
  auto s = pkg.run({}, {{"style", {}}, {"fast", few_step(4, 1.0)}}, &applied);
  CHECK(s.steps == 4);
  CHECK(applied.at("steps") == "fast");
  // Two that agree.
  s = pkg.run({}, {{"fast", few_step(4, 1.0)}, {"fast2", few_step(4, 1.0)}});
  CHECK(s.steps == 4);
  // Two that disagree on steps: named, with the way out.
  const auto e = error_of([&] { pkg.run({}, {{"fast4", few_step(4, 1.0)}, {"fast8", few_step(8, 1.0)}}); });
  CHECK(e == "loras: 'fast4' suggests steps 4 and 'fast8' suggests 8; give steps in the job to choose");
  // ... settled by the job's steps; guidance still agrees and applies.
  s = pkg.run({{"steps", 6}}, {{"fast4", few_step(4, 1.0)}, {"fast8", few_step(8, 1.0)}}, &applied);
  CHECK(s.steps == 6);
  CHECK(s.guidance == 1.0);
  CHECK(applied == std::map<std::string, std::string>{{"guidance", "fast4"}});
}

TEST_CASE("a suggestion outside the model's limits is refused naming the field and the LoRA") {
  Package pkg;
  pkg.limits.max_steps = 50;
  const auto e = error_of([&] { pkg.run({}, {{"slow", few_step(100, 1.0)}}); });
  CHECK(e.find("steps: must be between 1 and 50 (got 100)") == 0);
  CHECK(e.find("steps from 'slow'") != std::string::npos);
  // The job's own bad field is reported as before, without a LoRA in the message.
  const auto own = error_of([&] { pkg.run({{"steps", 100}}, {}); });
  CHECK(own == "steps: must be between 1 and 50 (got 100)");
}

TEST_CASE("the shift job field: parsed, checked, echoed only when set") {
  SpecLimits limits;
  auto s = parse_job_spec(boost::json::object{{"prompt", "p"}, {"shift", 5}}, JobSpec{}, limits);
  CHECK(s.shift == 5.0);
  CHECK(to_json(s).at("shift").to_number<double>() == 5.0);
  CHECK_FALSE(to_json(parse_job_spec(boost::json::object{{"prompt", "p"}}, JobSpec{}, limits)).contains("shift"));
  CHECK(error_of([&] { parse_job_spec(boost::json::object{{"prompt", "p"}, {"shift", -1}}, JobSpec{}, limits); }) ==
        "shift: must be between 0 (the package's) and 100 (got -1)");
  CHECK(error_of([&] { parse_job_spec(boost::json::object{{"prompt", "p"}, {"shift", "x"}}, JobSpec{}, limits); }) ==
        "shift: must be a number (got \"x\")");
  // A different shift is a different video: a different content key.
  auto t = s;
  t.shift = 6.0;
  CHECK(job_content_key("m", s).hex() != job_content_key("m", t).hex());
}
