#include "runtime/semaphore.hpp"

#include <stdexcept>

namespace vgen {

AsyncSemaphore::AsyncSemaphore(std::size_t permits) : state_(std::make_shared<State>(permits)) {
  if (permits == 0) throw std::invalid_argument("AsyncSemaphore needs at least one permit");
}

boost::asio::awaitable<AsyncSemaphore::Permit> AsyncSemaphore::acquire_permit() {
  co_await acquire(boost::asio::use_awaitable);
  co_return Permit(this);
}

bool AsyncSemaphore::try_acquire() {
  std::lock_guard lock(state_->mutex);
  if (state_->available == 0 || !state_->waiters.empty()) return false;
  --state_->available;
  return true;
}

void AsyncSemaphore::release() {
  std::unique_lock lock(state_->mutex);
  if (!state_->waiters.empty()) {  // hand the permit straight to the oldest waiter
    auto w = state_->waiters.pop_front();
    lock.unlock();
    std::move(w).complete(error_code{});
    return;
  }
  if (state_->available == state_->limit)
    throw std::logic_error("AsyncSemaphore::release without a matching acquire");
  ++state_->available;
}

void AsyncSemaphore::State::cancel(std::uint64_t id) {
  std::unique_lock lock(mutex);
  auto w = waiters.remove(id);
  lock.unlock();
  if (w) std::move(*w).complete(boost::asio::error::operation_aborted);
}

std::size_t AsyncSemaphore::limit() const noexcept { return state_->limit; }
std::size_t AsyncSemaphore::available() const {
  std::lock_guard lock(state_->mutex);
  return state_->available;
}
std::size_t AsyncSemaphore::in_use() const {
  std::lock_guard lock(state_->mutex);
  return state_->limit - state_->available;
}
std::size_t AsyncSemaphore::waiting() const {
  std::lock_guard lock(state_->mutex);
  return state_->waiters.size();
}

}  // namespace vgen
