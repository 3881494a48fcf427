#include "runtime/fault_injector.hpp"

#include "runtime/content_key.hpp"
#include "runtime/errors.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <csignal>
#include <cstring>
#include <unistd.h>
#include <memory>

namespace vgen {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

double rate(const json::value& v, const std::string& path) {
  if (!v.is_number()) throw_error(ErrorKind::invalid_argument, path + ": must be a number in [0, 1]");
  const double r = v.to_number<double>();
  if (!(r >= 0.0 && r <= 1.0)) throw_error(ErrorKind::invalid_argument, path + ": must be in [0, 1] (got " + json::serialize(v) + ")");
  return r;
}

std::int64_t whole(const json::value& v, const std::string& path, std::int64_t max) {
  if (!v.is_int64() && !v.is_uint64()) throw_error(ErrorKind::invalid_argument, path + ": must be a whole number");
  const auto x = v.to_number<std::int64_t>();
  if (x < 0 || x > max) throw_error(ErrorKind::invalid_argument, path + ": must be between 0 and " + std::to_string(max));
  return x;
}

const StageFaults* faults_for(const FaultPlan& plan, const std::string& stage) {
  if (auto it = plan.stages.find(stage); it != plan.stages.end()) return &it->second;
  if (auto it = plan.stages.find("*"); it != plan.stages.end()) return &it->second;
  return nullptr;
}

}  // namespace

void FaultInjector::crash_if(std::string_view point, const boost::json::value& spec) const {
  if (plan_.crash_stage.empty() || point != plan_.crash_stage) return;
  const auto* prompt = spec.is_object() ? spec.get_object().if_contains("prompt") : nullptr;
  if (prompt && prompt->is_string() && std::string_view(prompt->get_string()).find(plan_.crash_prompt) != std::string_view::npos)
    ::kill(::getpid(), SIGKILL);  // a worker crash as the kernel delivers it: nothing runs after this
}

namespace {

asio::awaitable<void> inject(const FaultInjector* injector, StageFaults faults, std::string stage,
                             std::shared_ptr<StageFn> inner, Job& job) {
  injector->crash_if(stage, job.spec());
  if (faults.latency.count() > 0) {
    asio::steady_timer t(co_await asio::this_coro::executor, faults.latency);
    co_await t.async_wait(asio::use_awaitable);
  }
  const int attempt = job.snapshot().attempts;  // grows with every retry of this job
  const double u = injector->draw(job.id(), stage, attempt);
  if (u < faults.permanent_rate)
    throw_error(ErrorKind::internal, "injected permanent fault in " + stage);
  if (u < faults.permanent_rate + faults.transient_rate)
    throw_error(ErrorKind::transient, "injected transient fault in " + stage + " (attempt " + std::to_string(attempt + 1) + ")");
  co_await (*inner)(job);
  if (injector->holds(stage, job.spec())) {
    // A cancel sets the event, or aborts the wait through the stage's cancellation: either way, ends here.
    co_await job.cancel_event().wait(asio::as_tuple(asio::use_awaitable));
    job.throw_if_cancelled();
  }
}

bool prompt_has(const boost::json::value& spec, const std::string& text) {
  const auto* prompt = spec.is_object() ? spec.get_object().if_contains("prompt") : nullptr;
  return prompt && prompt->is_string() && std::string_view(prompt->get_string()).find(text) != std::string_view::npos;
}

std::pair<std::string, std::string> stage_and_prompt(const json::value& v, const std::string& path) {
  const auto* c = v.if_object();
  const auto* st = c ? c->if_contains("stage") : nullptr;
  const auto* pr = c ? c->if_contains("prompt") : nullptr;
  if (!st || !st->is_string() || !pr || !pr->is_string() || pr->get_string().empty() || c->size() != 2)
    throw_error(ErrorKind::invalid_argument, path + ": must be {\"stage\": name, \"prompt\": non-empty text}");
  return {std::string(st->get_string()), std::string(pr->get_string())};
}

}  // namespace

bool FaultInjector::holds(std::string_view stage, const boost::json::value& spec) const {
  for (const auto& [s, prompt] : plan_.holds)
    if (s == stage && prompt_has(spec, prompt)) return true;
  return false;
}

bool FaultPlan::enabled() const {
  for (const auto& [_, f] : stages)
    if (f.transient_rate > 0 || f.permanent_rate > 0 || f.latency.count() > 0) return true;
  return oom_rate > 0 || oom_above_batch > 0 || !crash_stage.empty() || !holds.empty();
}

FaultPlan parse_fault_plan(const json::object& o, const std::string& origin) {
  FaultPlan plan;
  for (const auto& kv : o) {
    const std::string key(kv.key());
    const auto path = origin + "." + key;
    if (key == "seed") plan.seed = static_cast<std::uint64_t>(whole(kv.value(), path, INT64_MAX));
    else if (key == "oom_rate") plan.oom_rate = rate(kv.value(), path);
    else if (key == "oom_above_batch") plan.oom_above_batch = static_cast<std::size_t>(whole(kv.value(), path, 1 << 20));
    else if (key == "crash") {
      const auto* c = kv.value().if_object();
      const auto* st = c ? c->if_contains("stage") : nullptr;
      const auto* pr = c ? c->if_contains("prompt") : nullptr;
      if (!st || !st->is_string() || !pr || !pr->is_string() || pr->get_string().empty() || c->size() != 2)
        throw_error(ErrorKind::invalid_argument, path + ": must be {\"stage\": name, \"prompt\": non-empty text}");
      plan.crash_stage = std::string(st->get_string());
      plan.crash_prompt = std::string(pr->get_string());
    }
    else if (key == "hold") {
      if (const auto* list = kv.value().if_array()) {
        for (std::size_t i = 0; i < list->size(); ++i)
          plan.holds.push_back(stage_and_prompt((*list)[i], path + "[" + std::to_string(i) + "]"));
      } else {
        plan.holds.push_back(stage_and_prompt(kv.value(), path));
      }
    }
    else if (key == "stages") {
      if (!kv.value().is_object()) throw_error(ErrorKind::invalid_argument, path + ": must be an object of stage names");
      for (const auto& st : kv.value().get_object()) {
        const auto sp = path + "." + std::string(st.key());
        if (!st.value().is_object()) throw_error(ErrorKind::invalid_argument, sp + ": must be an object");
        StageFaults f;
        for (const auto& fk : st.value().get_object()) {
          const std::string k(fk.key());
          if (k == "transient_rate") f.transient_rate = rate(fk.value(), sp + "." + k);
          else if (k == "permanent_rate") f.permanent_rate = rate(fk.value(), sp + "." + k);
          else if (k == "latency_ms") f.latency = std::chrono::milliseconds(whole(fk.value(), sp + "." + k, 600'000));
          else throw_error(ErrorKind::invalid_argument, sp + "." + k + ": unknown key (known: latency_ms, permanent_rate, transient_rate)");
        }
        if (f.transient_rate + f.permanent_rate > 1.0) throw_error(ErrorKind::invalid_argument, sp + ": rates add up to more than 1");
        plan.stages[std::string(st.key())] = f;
      }
    } else {
      throw_error(ErrorKind::invalid_argument, path + ": unknown key (known: crash, hold, oom_above_batch, oom_rate, seed, stages)");
    }
  }
  return plan;
}

double FaultInjector::draw(const std::string& job, const std::string& what, int attempt) const {
  const auto key = content_key("vgen-fault", json::array{plan_.seed, job, what, attempt});
  std::uint64_t bits = 0;
  std::memcpy(&bits, key.bytes.data(), sizeof bits);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

StageSpec FaultInjector::wrap(StageSpec stage) const {
  const auto* f = faults_for(plan_, stage.name);
  const bool crash = !plan_.crash_stage.empty() && plan_.crash_stage == stage.name;
  bool hold = false;
  for (const auto& [s, _] : plan_.holds) hold = hold || s == stage.name;
  if (!crash && !hold && (!f || (f->transient_rate == 0 && f->permanent_rate == 0 && f->latency.count() == 0))) return stage;
  auto inner = std::make_shared<StageFn>(std::move(stage.fn));
  stage.fn = [this, faults = f ? *f : StageFaults{}, name = stage.name, inner](Job& job) {
    return inject(this, faults, name, inner, job);
  };
  return stage;
}

void FaultInjector::check_oom(std::size_t jobs, const std::string& device, const std::string& first_job, int attempt) const {
  const bool too_big = plan_.oom_above_batch > 0 && jobs > plan_.oom_above_batch;
  if (too_big || (plan_.oom_rate > 0 && draw(first_job, "oom", attempt) < plan_.oom_rate))
    throw_error(ErrorKind::out_of_memory, "injected out-of-memory on " + device + " (model call over " + std::to_string(jobs) + " jobs)");
}

}  // namespace vgen
