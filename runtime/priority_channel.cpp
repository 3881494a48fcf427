#include "runtime/priority_channel.hpp"

namespace vgen {

std::chrono::steady_clock::time_point queue_rank(const QueueTicket& ticket, std::chrono::milliseconds aging) {
  // A priority is bounded by the job spec's range, so the product stays far inside the clock's range.
  return ticket.since - aging * static_cast<std::int64_t>(ticket.priority);
}

}  // namespace vgen
