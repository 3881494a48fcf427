#include "api/result_lookup.hpp"

#include "runtime/atomic_file.hpp"

#include <boost/asio/use_awaitable.hpp>

namespace vgen::detail {

namespace asio = boost::asio;

ResultLookup::ResultLookup(ResultCache& cache, WorkerPool& copies, Context context)
    : cache_(cache), copies_(copies), context_(std::move(context)) {}

PipelineHook ResultLookup::hook(std::size_t workers, std::size_t queue_capacity) {
  return PipelineHook{"lookup", workers, queue_capacity, [this](Job& job) { return serve(job); }};
}

asio::awaitable<HookOutcome> ResultLookup::serve(Job& job) {
  auto entry = context_.entry(job.id());
  if (!entry || !cache_.enabled()) co_return HookOutcome::go_on;
  entry->key = context_.key(job);
  const auto out = context_.output(job);
  for (;;) {
    if (auto hit = cache_.get(*entry->key)) {
      auto copy = [from = hit->path, out] { copy_atomically(from, out); };
      co_await copies_.run(copy, asio::use_awaitable);
      entry->cached_output = out;
      entry->cache_hit = true;
      hits_.fetch_add(1);
      co_return HookOutcome::done;
    }
    auto leader = cache_.lead(*entry->key, entry);
    if (!leader) {
      entry->leader = true;
      co_return HookOutcome::go_on;  // render it
    }
    co_await leader->ended.wait(asio::use_awaitable);  // then the cache has its output, or it failed and we lead
  }
}

void ResultLookup::finish(JobEntry& entry, const JobResult& r) {
  if (r.state == JobState::done && !r.cache_hit && entry.key) cache_.put(*entry.key, r.output);
  if (entry.leader) cache_.release(*entry.key, &entry);
}

}  // namespace vgen::detail
