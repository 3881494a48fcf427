// Fuzzes the job-spec and batch-input parsers (stages/job_spec, api/batch/batch_input): the input
// is taken as one JSON job (an HTTP body, a CLI spec), as a prompt file / JSONL text whose
// valid items then go through the job-spec parser as `vgen batch` does, and as an output name.
// Only Error(invalid_argument) may come out; a valid spec must survive a round trip through
// its JSON form unchanged, and a valid name can never leave its directory.
#include "api/batch/batch_input.hpp"
#include "runtime/errors.hpp"
#include "stages/job_spec.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <boost/json.hpp>

namespace {

using vgen::fuzz::require;

const vgen::SpecLimits& limits() {
  static const vgen::SpecLimits l = [] {
    vgen::SpecLimits x;
    x.schedulers = {"UniPCMultistepScheduler", "FlowMatchEulerDiscreteScheduler"};
    return x;
  }();
  return l;
}

void check_spec(const boost::json::value& json) {
  vgen::JobSpec spec;
  try {
    spec = vgen::parse_job_spec(json, vgen::JobSpec{}, limits());
  } catch (const vgen::Error& e) {
    require(e.kind() == vgen::ErrorKind::invalid_argument, "parse_job_spec: only invalid_argument");
    return;
  }
  const auto fields = vgen::to_json(spec);
  const auto again = vgen::parse_job_spec(fields, vgen::JobSpec{}, limits());  // must not throw
  require(vgen::to_json(again) == fields, "parse_job_spec(to_json(spec)) == spec");
  require(vgen::job_content_key("m", again) == vgen::job_content_key("m", spec), "content key is stable");
}

void check_name(const std::string& name) {
  try {
    const auto n = vgen::checked_output_name(name);
    require(n == name && n.find('/') == std::string::npos && n.front() != '.' && n.size() <= 100,
            "checked_output_name: a stem inside its directory");
  } catch (const vgen::Error& e) {
    require(e.kind() == vgen::ErrorKind::invalid_argument, "checked_output_name: only invalid_argument");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = vgen::fuzz::text_of(data, size);

  boost::system::error_code ec;
  const auto json = boost::json::parse(text, ec);
  if (!ec) check_spec(json);

  try {
    const boost::json::object defaults{{"steps", 4}, {"width", 32}};
    for (const auto& item : vgen::parse_batch_text(text, defaults)) {
      require(item.line >= 1, "batch item line numbers are 1-based");
      if (!item.error.empty()) continue;
      if (!item.name.empty()) check_name(item.name);
      check_spec(item.spec);
    }
  } catch (const vgen::Error& e) {
    require(e.kind() == vgen::ErrorKind::invalid_argument, "parse_batch_text: only invalid_argument");
  }

  check_name(std::string(text));
  return 0;
}
