#include "runtime/event.hpp"

namespace vgen {

AsyncEvent::AsyncEvent() : state_(std::make_shared<State>()) {}

void AsyncEvent::set() {
  std::unique_lock lock(state_->mutex);
  if (state_->set) return;
  state_->set = true;
  auto all = state_->waiters.take_all();
  lock.unlock();
  for (auto& w : all) std::move(w).complete(error_code{});
}

bool AsyncEvent::is_set() const {
  std::lock_guard lock(state_->mutex);
  return state_->set;
}

void AsyncEvent::State::cancel(std::uint64_t id) {
  std::unique_lock lock(mutex);
  auto w = waiters.remove(id);
  lock.unlock();
  if (w) std::move(*w).complete(boost::asio::error::operation_aborted);
}

}  // namespace vgen
