// The JSON form of a JobResult (api/engine.hpp). Its own file because it needs no LibTorch:
// the HTTP fuzzer (tests/fuzz) links it next to a fake Runtime.
#include "api/engine.hpp"

#include <boost/json.hpp>

namespace vgen {

namespace json = boost::json;

json::object to_json(const JobResult& r) {
  json::object o{{"id", r.id}, {"status", std::string(status_name(r.state, r.stage))}, {"seconds", r.seconds},
                 {"retries", r.retries}, {"cache_hit", r.cache_hit}};
  json::object stages;
  for (const auto& [name, secs] : r.stage_seconds) stages[name] = secs;
  o["stage_seconds"] = std::move(stages);
  if (r.resumed_from_step > 0) o["resumed_from_step"] = r.resumed_from_step;
  if (r.state == JobState::done) {
    o["output"] = r.output.string();
    o["content_type"] = r.content_type;
    o["device"] = r.device;
    o["text_cache_hit"] = r.text_cache_hit;
  }
  if (r.error_kind) {
    o["error"] = json::object{{"kind", std::string(to_string(*r.error_kind))}, {"message", r.error}};
  }
  if (!r.spec.prompt.empty()) o["spec"] = to_json(r.spec);
  return o;
}

}  // namespace vgen
