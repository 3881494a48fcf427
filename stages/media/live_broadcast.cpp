#include "stages/media/live_broadcast.hpp"

#include <boost/asio/use_awaitable.hpp>

#include <utility>

namespace vgen {

bool LiveBudget::try_take(std::size_t n) {
  auto used = used_.load();
  do {
    if (n > total_ - used) return false;
  } while (!used_.compare_exchange_weak(used, used + n));
  return true;
}

void LiveBudget::give_back(std::size_t n) { used_.fetch_sub(n); }

LiveBroadcast::LiveBroadcast(std::size_t max_bytes, std::shared_ptr<LiveBudget> budget)
    : max_bytes_(max_bytes), budget_(std::move(budget)) {}

LiveBroadcast::~LiveBroadcast() {
  if (budget_) budget_->give_back(bytes_);
}

bool LiveBroadcast::append(std::string segment) {
  if (segment.empty()) return end() == End::open;
  std::shared_ptr<AsyncEvent> woken;
  {
    std::lock_guard lock(mutex_);
    if (end_ != End::open) return false;
    if (segment.size() > max_bytes_ - bytes_ || (budget_ && !budget_->try_take(segment.size()))) {
      end_ = End::truncated;  // bounded: the readers get what was written, then this end
    } else {
      bytes_ += segment.size();
      segments_.push_back(std::make_shared<const std::string>(std::move(segment)));
    }
    woken = std::exchange(grown_, std::make_shared<AsyncEvent>());
  }
  woken->set();  // outside the lock: set() posts each reader's wake to its own executor
  std::lock_guard lock(mutex_);
  return end_ == End::open;
}

void LiveBroadcast::finish(End how) {
  if (how == End::open) return;
  std::shared_ptr<AsyncEvent> woken;
  {
    std::lock_guard lock(mutex_);
    if (end_ != End::open) return;
    end_ = how;
    woken = grown_;  // never set again: no segment and no end follows
  }
  woken->set();
}

LiveBroadcast::Read LiveBroadcast::read_from(std::size_t index) const {
  std::lock_guard lock(mutex_);
  Read r;
  if (index < segments_.size()) r.segments.assign(segments_.begin() + static_cast<std::ptrdiff_t>(index), segments_.end());
  r.end = end_;
  return r;
}

boost::asio::awaitable<LiveBroadcast::Read> LiveBroadcast::next(std::size_t index) {
  while (true) {
    std::shared_ptr<AsyncEvent> grown;
    {
      std::lock_guard lock(mutex_);
      if (index < segments_.size() || end_ != End::open) break;
      grown = grown_;  // taken under the lock: a change after this sets exactly this event
    }
    co_await grown->wait(boost::asio::use_awaitable);
  }
  co_return read_from(index);
}

bool LiveBroadcast::started() const {
  std::lock_guard lock(mutex_);
  return !segments_.empty();
}

LiveBroadcast::End LiveBroadcast::end() const {
  std::lock_guard lock(mutex_);
  return end_;
}

std::size_t LiveBroadcast::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

std::shared_ptr<LiveBroadcast> LiveStreams::open(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto& b = streams_[id];
  if (!b) b = std::make_shared<LiveBroadcast>(max_bytes_, budget_);
  return b;
}

std::shared_ptr<LiveBroadcast> LiveStreams::start(const std::string& id) {
  std::shared_ptr<LiveBroadcast> stale;
  std::shared_ptr<LiveBroadcast> fresh;
  {
    std::lock_guard lock(mutex_);
    const auto it = streams_.find(id);
    if (it == streams_.end()) return nullptr;  // nobody watches
    auto& b = it->second;
    if (b->started() || b->end() != LiveBroadcast::End::open) {
      stale = std::exchange(b, std::make_shared<LiveBroadcast>(max_bytes_, budget_));
    }
    fresh = b;
  }
  if (stale) stale->finish(LiveBroadcast::End::failed);
  return fresh;
}

void LiveStreams::close(const std::string& id) {
  std::shared_ptr<LiveBroadcast> b;
  {
    std::lock_guard lock(mutex_);
    const auto it = streams_.find(id);
    if (it == streams_.end()) return;
    b = std::move(it->second);
    streams_.erase(it);
  }
  b->finish(LiveBroadcast::End::failed);  // a no-op when the encode completed it
}

std::size_t LiveStreams::size() const {
  std::lock_guard lock(mutex_);
  return streams_.size();
}

}  // namespace vgen
