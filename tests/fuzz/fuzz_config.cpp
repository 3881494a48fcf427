// Fuzzes the config loader (api/config): the input is the text of a config file, parsed as
// load_config does (JSON with comments and trailing commas) and applied by apply_config.
// Only Error(invalid_argument) naming the file may come out; an accepted config keeps every
// documented bound, its paths are absolute, and to_json describes it.
#include "api/config.hpp"
#include "runtime/errors.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <boost/json/serialize.hpp>

#include <string>

using vgen::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string origin = "config fuzz.json";
  vgen::RuntimeConfig c;
  try {
    c = vgen::parse_config(vgen::fuzz::text_of(data, size), origin, "/etc/vgen");
  } catch (const vgen::Error& e) {
    require(e.kind() == vgen::ErrorKind::invalid_argument, "only invalid_argument");
    require(std::string_view(e.what()).starts_with(origin + ": "), "the error names the file");
    return 0;
  }
  require(c.model.empty() || c.model.is_absolute(), "model: absolute");
  require(c.output_dir.is_absolute() || c.output_dir == ".", "output_dir: absolute");
  require(!c.devices.empty() && !c.encoder.preset.empty(), "strings: not empty");
  require(c.device_policy == "least_loaded" || c.device_policy == "round_robin", "device_policy: known");
  for (const auto& [name, stage] : c.stages)
    require(stage.workers >= 1 && stage.workers <= 256 && stage.queue >= 1, "stages: bounds");
  require(c.io_threads >= 1 && c.threads_per_device >= 1 && c.codec_threads >= 1, "threads: >= 1");
  require(c.batching.max_batch >= 1 && c.retry_attempts >= 1 && c.retry_multiplier >= 1.0, "batching/retry: bounds");
  require(c.retry_max_backoff >= c.retry_initial_backoff, "retry: max_backoff >= initial_backoff");
  require(c.encoder.crf >= 0 && c.encoder.crf <= 63, "encoder.crf: bounds");
  require(c.service.max_body_bytes >= 64 && c.service.max_connections >= 1, "service: bounds");
  require(c.service.listen.find(':') != std::string::npos, "service.listen: HOST:PORT");
  require(!boost::json::serialize(vgen::to_json(c)).empty(), "to_json");
  return 0;
}
