// Helpers shared by the Pipeline's tests (test_pipeline.cpp, test_pipeline_hooks.cpp): stub
// stages that record which job each ran.
#pragma once

#include "runtime/pipeline.hpp"
#include "tests/support/async_test.hpp"

#include <boost/json.hpp>

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace vgen::pipeline_test {

namespace asio = boost::asio;
using vgen::test::sleep_for;
using namespace std::chrono_literals;

// Records which stage ran which job, so every job can be accounted for.
struct Ledger {
  std::mutex m;
  std::map<std::string, std::multiset<std::string>> ran;  // stage -> job ids
  void note(const std::string& stage, const std::string& id) {
    std::lock_guard l(m);
    ran[stage].insert(id);
  }
  std::size_t count(const std::string& stage, const std::string& id) {
    std::lock_guard l(m);
    return ran[stage].count(id);
  }
};

inline int index_of(const Job& job) { return static_cast<int>(job.spec().at("i").as_int64()); }

// Four stub stages: preprocess, denoise (reports steps), decode, encode.
inline std::vector<StageSpec> stub_stages(Ledger& ledger, std::function<asio::awaitable<void>(Job&)> denoise_extra = {},
                                   std::size_t workers = 2, std::size_t capacity = 2) {
  auto simple = [&ledger](std::string name) {
    return [&ledger, name](Job& job) -> asio::awaitable<void> {
      ledger.note(name, job.id());
      co_await sleep_for(100us);
    };
  };
  StageFn denoise = [&ledger, denoise_extra](Job& job) -> asio::awaitable<void> {
    for (int step = 1; step <= 4; ++step) {
      job.throw_if_cancelled();
      co_await sleep_for(100us);
      job.report_progress(step, 4);
    }
    if (denoise_extra) co_await denoise_extra(job);
    ledger.note("denoise", job.id());
  };
  return {
      {"preprocess", workers, capacity, simple("preprocess")},
      {"denoise", workers, capacity, denoise},
      {"decode", workers, capacity, simple("decode")},
      {"encode", workers, capacity, simple("encode")},
  };
}

inline boost::json::value spec_for(int i) { return boost::json::object{{"i", i}}; }

}  // namespace vgen::pipeline_test
